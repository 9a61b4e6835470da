# Every task of the course is a target here. `make help` lists them.
PYTHON ?= python3.11
# VENV: the environment's folder; `make <target> VENV=other` builds (the first time) and uses another one.
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
LAB_ARGS ?=
EXCHANGE := $(abspath $(VENV))/share/nbgrader

# nbgrader 0.9.6's parts, by the names its package registers (nbgrader/server_extensions/ and the
# plugin ids in the @jupyter/nbgrader labextension). tests/test_lab_server.py checks the result.
STUDENT_SERVER_EXTS    := nbgrader.server_extensions.validate_assignment
INSTRUCTOR_SERVER_EXTS := nbgrader.server_extensions.formgrader nbgrader.server_extensions.course_list
STUDENT_LAB_PLUGINS    := @jupyter/nbgrader:validate-assignment
INSTRUCTOR_LAB_PLUGINS := @jupyter/nbgrader:formgrader @jupyter/nbgrader:course-list @jupyter/nbgrader:create-assignment
# A class's tools: the assignment list fetches and submits through a course exchange, and the Nbgrader menu only
# opens it (and the instructor's tools). Self-study has no exchange, so they are off here (not locked: a class
# set-up that configures an exchange turns them on).
CLASS_SERVER_EXTS      := nbgrader.server_extensions.assignment_list
CLASS_LAB_PLUGINS      := @jupyter/nbgrader:assignment-list @jupyter/nbgrader:menu
# The course's JupyterLab settings, in the venv: one kernel, the course's (the notebooks ask for it, the launcher
# offers only it), no "get notified about official Jupyter news?" pop-up on a student's first visit, and the course's
# CSS for nbgrader's Validate dialog and Assignments tab (jupyter/custom/custom.css). JupyterLab links custom.css
# where LabApp.custom_css is on, and jupyter_server looks for it in the user's Jupyter folder (custom/), then in its
# own static/custom/ folder, inside the venv: make puts it there (LAB_CSS).
KERNEL_CONFIG   := {"KernelSpecManager": {"allowed_kernelspecs": ["ddp-course"]}, \
                    "MultiKernelManager": {"default_kernel_name": "ddp-course"}, "LabApp": {"custom_css": true}}
LAB_SETTINGS    := {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}
LAB_CSS         := $(VENV)/lib/python3.11/site-packages/jupyter_server/static/custom/custom.css

.PHONY: help lab class-lab test test-fast test-browser test-gpu lint release autograde grade feedback bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

# The environment is rebuilt only when a file that defines it changes, so a second run installs nothing.
# Jupyter's settings go inside the venv (--sys-prefix), never into your home folder.
$(STAMP): requirements.txt pyproject.toml jupyter/custom/custom.css
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null || { \
	  echo "error: '$(PYTHON)' is missing or is not Python 3.11." >&2; \
	  echo "Install Python 3.11, or run 'make PYTHON=/path/to/python3.11 ...'." >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .  # `import utils` from any folder
	$(BIN)/python -m ipykernel install --sys-prefix --name ddp-course --display-name "Python (DDP course)" >/dev/null
	@# nbgrader's student tool (the Validate button) on; the instructor's tools off, and a class's (see above).
	$(BIN)/jupyter server extension enable --log-level=WARN --sys-prefix $(STUDENT_SERVER_EXTS)
	$(BIN)/jupyter server extension disable --log-level=WARN --sys-prefix $(INSTRUCTOR_SERVER_EXTS) $(CLASS_SERVER_EXTS)
	$(BIN)/jupyter labextension enable --log-level=WARN --level=sys_prefix $(STUDENT_LAB_PLUGINS)
	$(BIN)/jupyter labextension disable --log-level=WARN --level=sys_prefix $(INSTRUCTOR_LAB_PLUGINS) $(CLASS_LAB_PLUGINS)
	$(BIN)/jupyter labextension lock --log-level=WARN --level=sys_prefix $(INSTRUCTOR_LAB_PLUGINS)
	echo '$(KERNEL_CONFIG)' > $(VENV)/etc/jupyter/jupyter_server_config.json
	mkdir -p $(VENV)/share/jupyter/lab/settings/overrides.d
	echo '$(LAB_SETTINGS)' > $(VENV)/share/jupyter/lab/settings/overrides.d/ddp-course.json
	install -D -m 644 jupyter/custom/custom.css $(LAB_CSS)
	@# The exchange of a class on this machine (make release-lab, make class-lab): inside the venv, nothing leaves the repo.
	mkdir -p $(EXCHANGE)/exchange $(EXCHANGE)/cache
	printf 'c.Exchange.root = "%s/exchange"\nc.Exchange.cache = "%s/cache"\n' $(EXCHANGE) $(EXCHANGE) \
	  > $(VENV)/etc/jupyter/nbgrader_config.py
	@touch $@

# The test suite's own tools on top (requirements-test.txt): `make lab` never installs them.
$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	@touch $@

# JupyterLab refuses to run as root unless told, and rented GPU boxes and containers often give a root shell.
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)  ## set up (first time only) and start JupyterLab on course/
	@$(if $(ROOT_ARGS),echo "make lab: running as root (a container or a rented box?): passing --allow-root to JupyterLab")
	$(BIN)/jupyter lab --ServerApp.root_dir=course $(ROOT_ARGS) $(LAB_ARGS)

# A class's students: the same JupyterLab with the Assignments tab (fetch, submit, fetch feedback) and the Nbgrader
# menu on, through the exchange (jupyter/class/ turns them on for this JupyterLab only).
class-lab: $(STAMP)  ## JupyterLab on course/ with nbgrader's Assignments tab, for a class that uses the exchange
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter/class" $(BIN)/jupyter lab --ServerApp.root_dir=course $(ROOT_ARGS) $(LAB_ARGS)

test: $(TEST_STAMP)  ## set up (first time only) and run the whole test suite (every lab graded once)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(TEST_STAMP)  ## all but the grading run and the browser (a minute); one lab: make test PYTEST_ARGS="-m lab02"
	$(BIN)/python -m pytest -m "not slow and not browser" $(PYTEST_ARGS)

# `make test` runs the browser test too where it finds a Chromium, and otherwise says in one line how to enable it.
test-browser: $(TEST_STAMP)  ## JupyterLab as a student meets it, in headless Chromium (1-2 minutes; needs chromium)
	BROWSER_TEST_REQUIRED=1 $(BIN)/python -m pytest -m browser -rs $(PYTEST_ARGS)

# The GPU-only tests (-m gpu: NCCL itself against utils.nccl_rules' emulation, the launcher's NCCL group) and the
# grading run with the ranks on the GPUs. docs/testing.md says what its output should show.
test-gpu: $(TEST_STAMP)  ## on a GPU box: NCCL against the emulation, every lab graded on the GPUs (under 10 min)
	@$(BIN)/python -c 'import sys, torch; n = torch.cuda.device_count(); sys.exit(0 if n else "make test-gpu: \
	no CUDA GPU here (torch.cuda.device_count() is 0), so nothing was tested. Run it on a machine with GPUs."); \
	print(f"make test-gpu: {n} CUDA GPUs; a launch of N <= {n} ranks puts rank r on cuda:r (NCCL + Gloo)")'
	$(BIN)/python -m pytest -m "gpu or slow" -rs $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff over utils, tests, nbplumbing, autograder, benchmark, classroom and the notebooks
	$(BIN)/ruff check .

release: $(STAMP)  ## regenerate course/ from solutions/
	$(BIN)/python -m classroom release

autograde: $(STAMP)  ## grade submitted/ (as `make grade` does) into gradebook.db, grades.csv, feedback/ [GRADE_ARGS=...]
	$(BIN)/python -m autograder autograde $(GRADE_ARGS)

# Both refuse where no sandbox can be made, unless GRADE_ARGS=--no-sandbox (docs/sandbox.md).
grade: $(STAMP)  ## grade a class in parallel: make grade [SUBMISSIONS=submitted] [GRADE_ARGS="--out graded"]
	$(BIN)/python -m autograder grade $(or $(SUBMISSIONS),submitted) $(GRADE_ARGS)

feedback: $(STAMP)  ## write HTML feedback for every autograded submission into feedback/
	$(BIN)/python -m autograder feedback

bench: $(STAMP)  ## all-reduce benchmark: built-in vs reference ring/tree/naive, N = 2-4 (about 2 min; BENCH_ARGS=--quick)
	$(BIN)/python -m benchmark.bench $(BENCH_ARGS)

clean:  ## remove the environment and nbgrader's working state
	rm -rf $(VENV) gradebook.db submitted autograded feedback grades.csv graded bench-results

# ---- a class: the student edition, nbgrader's exchange, the instructor's JupyterLab, shards (README: "Three doors")
.PHONY: student-repo release-lab collect return-feedback instructor-lab merge
need = $(or $($(1)),$(error make $@ needs $(1)=..., e.g. $(2)))

student-repo: $(STAMP)  ## the student edition (no answers) as a git repository to push: make student-repo OUT=dir
	$(BIN)/python -m classroom export $(call need,OUT,OUT=../ddp-course-students)

release-lab: $(STAMP)  ## hand a lab out through nbgrader's exchange: make release-lab LAB=00_ranks_and_alpha_beta
	$(BIN)/python -m classroom release-lab $(call need,LAB,LAB=00_ranks_and_alpha_beta)

collect: $(STAMP)  ## the submissions of a lab from the exchange into submitted/ (then make autograde): LAB=...
	$(BIN)/python -m classroom collect $(call need,LAB,LAB=00_ranks_and_alpha_beta)

return-feedback: $(STAMP)  ## the feedback of a lab (after make autograde) to the students, through the exchange: LAB=...
	$(BIN)/python -m classroom return-feedback $(call need,LAB,LAB=00_ranks_and_alpha_beta)

merge: $(STAMP)  ## join the out folders of sharded runs: make merge OUT=graded SHARDS="graded-1 graded-2 graded-3"
	$(BIN)/python -m autograder merge $(call need,OUT,OUT=graded) $(call need,SHARDS,SHARDS="graded-1 graded-2")

# Formgrader and the create-assignment toolbar on, for this JupyterLab only (classroom/instructor/ says how);
# nbgrader creates the gradebook with the `alembic` of the venv, so the venv goes first on PATH.
instructor-lab: $(STAMP)  ## JupyterLab on the whole repository with formgrader, on the gradebook of make autograde
	PATH="$(abspath $(BIN)):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/classroom/instructor" \
	  $(BIN)/jupyter lab --ServerApp.root_dir=. $(ROOT_ARGS) $(LAB_ARGS)

# ---- a lab session on one server: JupyterHub for the class of a roster (docs/hub.md)
# As root on a Linux server. The hub's parts go into the venv only when one of these targets runs: JupyterHub and the
# idle culler (requirements-hub.txt) and configurable-http-proxy with Node.js 20 from npm (classroom/hub/proxy/, into
# .venv/hub-proxy/).
.PHONY: hub-install hub hub-stop hub-status hub-release hub-grade
HUB_STAMP := $(VENV)/.installed-hub
HUB_ARGS  ?=
# Where the venv's Python is closed to other users (pyenv's, in /root), the hub gets a venv of its own from the
# system's Python: make hub VENV=.venv-hub PYTHON=/usr/bin/python3.11 ROSTER=... (and VENV=.venv-hub on hub-*).
# HUB_DIR: the hub's folder; left out, the last `make hub`'s (the venv remembers it until hub-stop's --purge), else
# /srv/ddp-course-hub. ROSTER and HUB_DIR, when relative, are from where make was typed (make -C changes folder).
from_pwd   = $(if $(filter /%,$(1)),$(1),$(or $(PWD),$(CURDIR))/$(1))
HUB_WHERE  = $(if $(HUB_DIR),--dir $(call from_pwd,$(HUB_DIR)))

$(HUB_STAMP): $(STAMP) requirements-hub.txt classroom/hub/proxy/package.json classroom/hub/proxy/package-lock.json
	$(BIN)/python -m pip install --quiet -r requirements-hub.txt
	rm -rf $(VENV)/hub-proxy && mkdir -p $(VENV)/hub-proxy
	cp classroom/hub/proxy/package.json classroom/hub/proxy/package-lock.json $(VENV)/hub-proxy/
	cd $(VENV)/hub-proxy && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

hub-install: $(HUB_STAMP)  ## the hub's parts into the venv: JupyterHub, its idle culler, configurable-http-proxy

hub: $(HUB_STAMP)  ## as root: JupyterHub for a class: make hub ROSTER=roster.csv [HUB_DIR=...] [HUB_ARGS="--port 8000"]
	$(BIN)/python -m classroom.hub start --roster $(call from_pwd,$(call need,ROSTER,ROSTER=roster.csv)) $(HUB_WHERE) \
	  $(HUB_ARGS)

hub-stop: $(HUB_STAMP)  ## stop the hub and every server; HUB_ARGS=--purge also removes what it made but the grades
	$(BIN)/python -m classroom.hub stop $(HUB_WHERE) $(HUB_ARGS)

hub-status: $(HUB_STAMP)  ## is the hub up, who has a server running, its log (HUB_DIR/logs/hub.log)
	$(BIN)/python -m classroom.hub status $(HUB_WHERE)

hub-release: $(HUB_STAMP)  ## hand a lab out to the hub's students: make hub-release LAB=00_ranks_and_alpha_beta
	$(BIN)/python -m classroom.hub release $(call need,LAB,LAB=00_ranks_and_alpha_beta) $(HUB_WHERE)

hub-grade: $(HUB_STAMP)  ## collect, grade in the sandbox, return feedback: make hub-grade LAB=... [GRADE_ARGS=--workers 4]
	$(BIN)/python -m classroom.hub grade $(call need,LAB,LAB=00_ranks_and_alpha_beta) $(HUB_WHERE) $(GRADE_ARGS)

# ---- a class on a Slurm cluster (docs/instructors.md, *Grading on Slurm*): from a login node, in this repository
# on a file system that the compute nodes share. SHARDS array tasks each grade one shard of the students; a merge job
# waits for them all and joins them into OUT. ONLY=2 (or 1,3) resubmits those shards alone, with a new merge.
.PHONY: slurm-install slurm-grade slurm-status
SHARDS ?= 3
SLURM_ARGS ?=
# As root on Debian or Ubuntu: Slurm's daemons and clients and munge (what tests/test_slurm.py's one-node cluster
# runs), from the system's packages; nothing is started or enabled.
slurm-install:  ## as root on Debian/Ubuntu: Slurm and munge from the system's packages, for tests/test_slurm.py
	@if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then \
	  echo "make slurm-install: $$(slurmd -V) and $$(munged -V 2>&1 | head -n 1) are installed"; \
	else \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    slurm-wlm munge >/dev/null && echo "make slurm-install: installed $$(slurmd -V)"; \
	fi

slurm-grade: $(STAMP)  ## grade a class as a Slurm job array, then merge: make slurm-grade SUBMISSIONS=submitted [SHARDS=3]
	GRADER_PYTHON="$(abspath $(BIN))/python" SLURM_ARGS="$(SLURM_ARGS)" GRADE_ARGS="$(GRADE_ARGS)" \
	  classroom/slurm/submit.sh $(call from_pwd,$(or $(SUBMISSIONS),submitted)) $(call from_pwd,$(or $(OUT),graded)) \
	  $(SHARDS) $(ONLY)

slurm-status: ## where make slurm-grade's jobs stand: the queue, each shard's last progress line: [OUT=graded]
	classroom/slurm/status.sh $(call from_pwd,$(or $(OUT),graded))
