"""`make lab` serves what a student needs: lab 00, the course kernel only, nbgrader's student tools only.

Starts the real server through the Makefile on a free port and asks its REST API, as this user (root in CI:
`make lab` must then pass --allow-root by itself); as root, a dry run as an ordinary user too. The server runs
in its own process group, which is killed at the end whatever happens.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.common import free_port

REPO = Path(__file__).resolve().parents[1]
LAB_00 = "00_ranks_and_alpha_beta"
START_TIMEOUT_S = 120  # a cold start on a busy 2-core machine takes 10-30 s

STUDENT_PLUGINS = ["@jupyter/nbgrader:validate-assignment"]
# A class's tools (the assignment list needs a course exchange, the menu only opens it): off for self-study.
CLASS_PLUGINS = ["@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu"]
INSTRUCTOR_PLUGINS = [
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:create-assignment",
]


class Lab:
    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def request(self, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, str]:
        """(HTTP status, body text) of one authenticated request; never raises on an HTTP error."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def json(self, path: str, method: str = "GET", body: dict | None = None):
        status, text = self.request(path, method, body)
        assert status == 200, f"{method} {path} -> {status}: {text[:500]}"
        return json.loads(text)


ROOT_NOTE = "running as root"  # what `make lab` says when it passes --allow-root


@contextlib.contextmanager
def make_lab(tmp: Path, repo: Path = REPO, target: str = "lab", make_options: tuple[str, ...] = (),
             env: Mapping[str, str] | None = None):
    """`make lab` (or `target`) of `repo` on a free port: yields (Lab, its log). No --allow-root is passed: as root,
    `make lab` must add it by itself. `env` is added to its environment (serve())."""
    def command(lab_args: str) -> list[str]:
        return ["make", *make_options, target, f"LAB_ARGS={lab_args}"]

    with serve(tmp, command, f"`make {target}`", env=env, cwd=repo) as (server, log):
        yield server, log


@contextlib.contextmanager
def serve(tmp: Path, command: Callable[[str], list[str]], name: str, env: Mapping[str, str] | None = None,
          cwd: Path = REPO):
    """Run command(lab_args), a JupyterLab server given the options to listen on a free port with a fresh token;
    yield (Lab, its log) once it answers.

    User-level Jupyter folders and HOME point into tmp: only what `make` put in the venv counts, and nothing is
    written into a home folder. `env` is added to the server's environment; the command runs in `cwd`.
    """
    port, token = free_port(), secrets.token_hex(16)
    lab_args = f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.port_retries=0 --ServerApp.token={token}"
    full_env = dict(os.environ, HOME=str(tmp), JUPYTER_CONFIG_DIR=str(tmp / "config"),
                    JUPYTER_DATA_DIR=str(tmp / "data"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), **(env or {}))
    full_env.pop("MAKEFLAGS", None)  # under `make test`: start `make lab` as a student would, not as a sub-make
    log = open(tmp / "lab.log", "w+")
    proc = subprocess.Popen(command(lab_args), cwd=cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        server = Lab(f"http://127.0.0.1:{port}", token)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not answer within {START_TIMEOUT_S} s:\n{log_tail(log)}")
            try:
                if server.request("/api/status")[0] == 200:
                    break
            except OSError:  # not listening yet
                pass
            time.sleep(0.5)
        yield server, log
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with make_lab(tmp_path_factory.mktemp("jupyter")) as (server, log):
        assert (ROOT_NOTE in log_tail(log)) == (os.geteuid() == 0), log_tail(log)
        yield server


@pytest.mark.skipif(os.geteuid() != 0, reason="the `lab` fixture already runs `make lab` as this ordinary user")
def test_make_lab_passes_no_allow_root_for_an_ordinary_user(tmp_path):
    """As root (CI, a rented GPU box) the fixture proves that `make lab` passes --allow-root by itself and serves.
    As `nobody`, `make -n lab` shows the command it would run: without the flag and without the note. (Only the
    dry run, on a world-readable copy of the Makefile and what it depends on: the clone, and the venv's
    interpreter, may be out of an ordinary user's reach.)"""
    for name in ("Makefile", "requirements.txt", "pyproject.toml", "jupyter/custom/custom.css"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    tmp_path.chmod(0o755)
    env = dict(os.environ, HOME=str(tmp_path))
    env.pop("MAKEFLAGS", None)
    env.pop("MAKELEVEL", None)
    done = subprocess.run(["make", "-n", "lab"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          user=65534, group=65534)
    assert done.returncode == 0, done.stdout + done.stderr
    [command] = [line for line in done.stdout.splitlines() if "jupyter lab " in line]
    assert "--allow-root" not in command and ROOT_NOTE not in done.stdout, done.stdout


def log_tail(log, chars: int = 4000) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-chars:]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the whole process group (make and the server), SIGKILL to what outlives 20 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            proc.poll()  # reap make, so that it does not count as alive
            os.killpg(proc.pid, 0)  # raises ProcessLookupError once the whole group is gone
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def page_config(lab: Lab) -> dict:
    """The JSON JupyterLab embeds in its page: which extensions load, which plugins are disabled."""
    status, html = lab.request("/lab")
    assert status == 200, f"/lab -> {status}"
    m = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
    assert m, "no jupyter-config-data in the /lab page"
    return json.loads(m.group(1))


def test_lab_00_is_listed(lab):
    folder = REPO / "course" / LAB_00
    if not folder.is_dir():
        pytest.skip(f"course/{LAB_00}/ does not exist yet (run `make release` once solutions/{LAB_00} exists)")
    listing = lab.json(f"/api/contents/{LAB_00}")
    listed = {item["name"] for item in listing["content"] if item["type"] == "notebook"}
    on_disk = {p.name for p in folder.glob("*.ipynb")}
    assert on_disk, f"course/{LAB_00}/ holds no notebook"
    assert listed == on_disk


def test_course_kernel_runs_the_venv_python(lab):
    """The one kernel offered, and the default: the launcher shows a single entry, and no notebook asks which."""
    reply = lab.json("/api/kernelspecs")
    specs = reply["kernelspecs"]
    assert list(specs) == ["ddp-course"] and reply["default"] == "ddp-course", f"kernels: {reply}"
    python = Path(specs["ddp-course"]["spec"]["argv"][0])
    assert python.parent.resolve() == (REPO / ".venv" / "bin").resolve()


def test_assignment_list_is_off_for_self_study(lab):
    """Without a course exchange it could only say "No courses found"."""
    assert lab.request("/courses")[0] == 404


def test_validate_button_has_its_server_side(lab):
    reply = lab.json("/assignments/validate", "POST", {"path": "no-such-notebook.ipynb"})
    assert reply["success"] is False and "no-such-notebook.ipynb" in reply["value"]


def test_the_course_css_is_linked_and_served(lab):
    """jupyter/custom/custom.css styles nbgrader's Validate dialog and Assignments tab (tests/test_browser.py checks
    what it does): the /lab page links it, and the server serves the repository's copy."""
    status, html = lab.request("/lab")
    assert status == 200 and 'href="/custom/custom.css"' in html, "the /lab page does not link custom/custom.css"
    status, css = lab.request("/custom/custom.css")
    assert (status, css) == (200, (REPO / "jupyter" / "custom" / "custom.css").read_text()), (
        f"/custom/custom.css -> {status}, not jupyter/custom/custom.css: run make to install it")


@pytest.mark.parametrize("path", ["/formgrader", "/formgrader/api/status", "/formgraders"])
def test_instructor_server_extensions_are_off(lab, path):
    assert lab.request(path)[0] == 404


def test_lab_plugins_student_on_instructor_off(lab):
    config = page_config(lab)
    assert "@jupyter/nbgrader" in [ext["name"] for ext in config["federated_extensions"]]
    disabled = set(config["disabledExtensions"])
    assert set(INSTRUCTOR_PLUGINS + CLASS_PLUGINS) <= disabled
    assert not set(STUDENT_PLUGINS) & disabled


def test_plugin_ids_exist_in_nbgrader_bundle():
    """A misspelt id would be 'disabled' without effect: each id must be one nbgrader really registers."""
    static = REPO / ".venv/share/jupyter/labextensions/@jupyter/nbgrader/static"
    bundle = "".join(p.read_text() for p in static.glob("*.js"))
    for plugin in STUDENT_PLUGINS + INSTRUCTOR_PLUGINS + CLASS_PLUGINS:
        assert plugin in bundle, plugin


def test_class_lab_turns_the_assignments_tab_on(tmp_path):
    """`make class-lab`: the same JupyterLab with the class's tools on, on the exchange that `make` set up."""
    with make_lab(tmp_path, target="class-lab") as (server, _):
        assert server.request("/courses")[0] == 200  # the assignment list's server side, on the venv's exchange
        disabled = set(page_config(server)["disabledExtensions"])
        assert not set(CLASS_PLUGINS + STUDENT_PLUGINS) & disabled
        assert set(INSTRUCTOR_PLUGINS) <= disabled
