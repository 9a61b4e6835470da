"""The set-up is reproducible: exact pins, two dependency files that agree, lint, make."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def requirements(name: str = "requirements.txt") -> list[str]:
    lines = (REPO / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_environment_yml_mirrors_requirements_txt():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    assert env["dependencies"] == ["python=3.11", "pip", {"pip": requirements()}]


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-test.txt", "requirements-hub.txt"])
def test_every_requirement_is_pinned_exactly(name: str):
    reqs = requirements(name)
    assert reqs, f"{name} lists nothing"
    unpinned = [r for r in reqs if not re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9.+!-]+", r)]
    assert not unpinned, f"pin these with ==: {unpinned}"


@pytest.mark.parametrize("extra", ["requirements-test.txt", "requirements-hub.txt"])
def test_students_do_not_install_the_test_or_hub_tools(extra: str):
    student = {r.split("==")[0] for r in requirements()}
    assert not student & {r.split("==")[0] for r in requirements(extra)}


@pytest.mark.parametrize("target", ["lab", "test"])
def test_only_the_hub_targets_install_the_hub(target: str):
    """`make lab` and `make test` never install JupyterHub or its proxy (their recipes, as if nothing were made yet:
    `make -n -B`), while `make hub-install` does."""
    def recipe(name: str) -> str:
        return subprocess.run(["make", "-n", "-B", name], cwd=REPO, capture_output=True, text=True, check=True).stdout

    assert "requirements-hub.txt" in recipe("hub-install") and "npm ci" in recipe("hub-install")
    assert "requirements-hub.txt" not in recipe(target) and "npm" not in recipe(target)


def test_torch_is_pinned_to_the_course_version():
    assert "torch==2.13.0" in requirements()


def test_ruff_passes():
    # pyproject.toml's [tool.ruff] says what is checked: the Python packages, the tests and the notebooks.
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_utils_imports_from_any_folder(tmp_path):
    # The editable install is what lets a notebook in course/NN_topic/ write `import utils`.
    result = subprocess.run([sys.executable, "-c", "import utils; print(utils.__file__)"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == REPO / "utils" / "__init__.py"


def test_second_make_installs_nothing():
    stamps = [".venv/.installed", ".venv/.installed-test"]
    if not all((REPO / stamp).exists() for stamp in stamps):
        pytest.skip("no .venv made by `make test` here (run the suite with `make test`)")
    result = subprocess.run(["make", "-q", *stamps], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, "`make` would set up again with its requirements and pyproject.toml unchanged"
