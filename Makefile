# Every task of the course is a target here. `make help` lists them.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_ARGS ?=

.PHONY: help lab test lint release autograde feedback clean

help:  ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

# The environment is rebuilt only when a file that defines it changes, so a second run installs nothing.
$(STAMP): requirements.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name ddp-course --display-name "Python (DDP course)" >/dev/null
	$(BIN)/jupyter server extension enable --sys-prefix nbgrader.server_extensions.assignment_list >/dev/null 2>&1
	$(BIN)/jupyter server extension enable --sys-prefix nbgrader.server_extensions.validate_assignment >/dev/null 2>&1
	@touch $@

lab: $(STAMP)  ## set up (first time only) and start JupyterLab on course/
	$(BIN)/jupyter lab --ServerApp.root_dir=course $(LAB_ARGS)

test: $(STAMP)  ## set up (first time only) and run the whole test suite
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff over utils, tests, autograder and the notebooks
	$(BIN)/ruff check .

release: $(STAMP)  ## regenerate course/ from solutions/
	$(BIN)/python -m autograder release

autograde: $(STAMP)  ## grade every submission in submitted/, print the score table, write grades.csv
	$(BIN)/python -m autograder autograde

feedback: $(STAMP)  ## write HTML feedback for every autograded submission into feedback/
	$(BIN)/python -m autograder feedback

clean:  ## remove the environment and nbgrader's working state
	rm -rf $(VENV) gradebook.db submitted autograded feedback grades.csv
