"""A lab session on one server, end to end: `make hub`'s JupyterHub, a roster of two students and one instructor.

As root, in a scratch folder, on a free port: the hub starts (classroom.hub.server.start, what `make hub` runs);
student A logs in over HTTP with the hub's login form and their server starts with the course's JupyterLab; the
instructor releases lab 00; A fetches it and submits it (through A's server's Assignments API, as the tab does); the
instructor collects, grades in the sandbox and returns the feedback (`make hub-grade`), and A fetches it; B cannot
read A's home, the exchange's submissions or the answers; no student reaches formgrader, the instructor does; in
Chromium, a student logs in and sees lab 00 in JupyterLab. What a student could try on the exchange (issue #34) is
tried from A's own shell (runuser): a submission in B's name, one with a link to the solution, one that is a link to
`/`, and renaming, replacing or adding the exchange's folders; the instructor's result is checked (the three refused
and reported, B's own submission, from B's shell, graded, the folders root's with their modes). Then `make hub-stop
HUB_ARGS=--purge` must leave nothing but the grades it keeps: users, homes, processes, cgroups, the exchange and the
repository's modes as they were. The fixture's finalizer runs the same clean-up when a step fails.

A submits lab 00 as fetched (untouched): its score is known (zero, every test cell failing) and it grades quickest.
Where the venv's Python lives below a folder that other users cannot pass (a pyenv Python in /root, 0700, as on CI's
machines), the test lets them through (o+x: pass, not list) while it runs and restores the mode after; a clone in a
0700 folder (mktemp -d) is also made listable (o+rx), since the servers import from it.

Needs root and the hub's parts (`make hub-install`); without them the hub's tests are skipped with a line that says
so, unless HUB_TEST_REQUIRED=1 (.ci/run sets it, as BROWSER_TEST_REQUIRED for the browser), where that is a
failure. The roster's checks, first, need neither.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from autograder.run import Options
from classroom.hub import exchange, feedback, limits, roster, server
from nbplumbing.adapter import read_score
from nbplumbing.processes import tagged_processes
from tests import corpus
from tests.common import ROOT, page_text

HOW_TO_ENABLE = "run as root after `make hub-install`"
pytestmark = pytest.mark.slow  # one grading run and a hub (about a minute): left out of `make test-fast`

LAB = "00_ranks_and_alpha_beta"
SPAWN_S = 120.0  # a first server start on a busy 2-core machine (JupyterLab's imports dominate)
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


@pytest.mark.parametrize(("line", "says"), [
    ("Alyssa,Alyssa P. Hacker,student", "is not a username"),
    ("alyssa,Alyssa P. Hacker,teacher", "role 'teacher' is none of student, instructor"),
    ("alyssa,Alyssa,student,extra", "want username,full name,role"),
    ("alyssa,Alyssa,student\nalyssa,Alyssa again,student", "alyssa is on the roster twice"),
    ("eva,Eva Lu Ator,instructor", "no student on the roster"),
])
def test_a_bad_roster_is_refused_saying_where(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "roster.csv"
    path.write_text(f"username,name,role\n{line}\n")
    with pytest.raises(roster.RosterError, match=re.escape(says)):
        roster.read_roster(path)


def test_a_roster_reads_in_order_header_or_not(tmp_path: Path) -> None:
    path = tmp_path / "roster.csv"
    path.write_text("ben,Ben Bitdiddle,student\n\neva, Eva Lu Ator ,instructor\n")
    assert roster.read_roster(path) == [roster.Person("ben", "Ben Bitdiddle", "student"),
                                        roster.Person("eva", "Eva Lu Ator", "instructor")]


def test_a_closed_python_is_refused_with_a_way_that_opens_nothing(tmp_path: Path, monkeypatch) -> None:
    """A venv whose Python lies in a folder other users cannot pass (pyenv's in /root) is named, and the way out is
    a venv from the system's Python, never `chmod o+x` (which would open /root to every student)."""
    closed = tmp_path / "closed" / "bin"
    closed.mkdir(parents=True)
    (closed / "python3.11").touch()
    os.chmod(closed.parent, 0o700)
    monkeypatch.setattr("sys.executable", str(closed / "python3.11"))
    blocked = server.unreachable()
    assert closed.parent in blocked, blocked
    says = server.blocked_message(blocked)
    assert "VENV=.venv-hub PYTHON=/usr/bin/python3.11" in says and "chmod" not in says, says


def test_make_takes_a_relative_roster_and_hub_dir_from_where_it_was_typed(tmp_path: Path) -> None:
    """`make -C <clone> hub ROSTER=roster.csv HUB_DIR=hub`, typed in tmp_path: both are tmp_path's."""
    shown = subprocess.run(["make", "-n", "-C", str(ROOT), "hub", "ROSTER=roster.csv", "HUB_DIR=hub"], cwd=tmp_path,
                           env={**os.environ, "PWD": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert f"start --roster {tmp_path}/roster.csv --dir {tmp_path}/hub" in shown.stdout, shown.stdout + shown.stderr


def test_the_grading_report_tops_each_feedback_page_once(tmp_path: Path) -> None:
    folder = tmp_path / "feedback" / "alyssa" / LAB
    folder.mkdir(parents=True)
    (folder / "grading_report.html").write_text("<html><body><h1>lab: 3 / 7 (graded)</h1></body></html>")
    (folder / "notebook.html").write_text("<html><body class='x'><p>nbgrader's page</p></body></html>")
    for _ in range(2):  # a second hub-grade replaces the report, it does not add one
        feedback.add_grading_reports(tmp_path / "feedback", LAB)
    page = (folder / "notebook.html").read_text()
    assert page.count("lab: 3 / 7 (graded)") == 1 and page.index("lab: 3 / 7") < page.index("nbgrader's page"), page


class Visitor:
    """One person's browser-less session on the hub: its cookies, and the hub's login form."""

    def __init__(self, hub: dict, username: str):
        import requests  # JupyterHub's own dependency: there whenever the hub is

        self.base, self.username = f"http://127.0.0.1:{hub['port']}", username
        self.password = hub["passwords"][username]
        self.http = requests.Session()

    def get(self, path: str):
        return self.http.get(self.base + path, timeout=60)

    def post(self, path: str, **data: str):
        """POST with the _xsrf cookie that the server at `path` set (Jupyter's check_xsrf wants it as a header)."""
        xsrf = max((c for c in self.http.cookies if c.name == "_xsrf" and path.startswith(c.path)),
                   key=lambda c: len(c.path)).value
        return self.http.post(self.base + path, data=data, headers={"X-XSRFToken": xsrf}, timeout=120)

    def assignments(self, action: str, course_id: str) -> list[dict]:
        """What the Assignments tab does: POST fetch, submit or fetch_feedback of lab 00 to the user's server;
        the assignment list it answers with."""
        answer = self.post(f"/user/{self.username}/assignments/{action}", course_id=course_id, assignment_id=LAB)
        reply = answer.json()
        assert answer.ok and reply["success"], f"{self.username}'s {action}: {reply}"
        return reply["value"]

    def log_in(self, then: str = "") -> None:
        """Post the login form (with its _xsrf cookie); JupyterHub then starts the user's server, unless `then`
        names another page to go to (the hub's home page starts nothing)."""
        self.get("/hub/login")
        answer = self.http.post(f"{self.base}/hub/login?next={then}", timeout=60, data={
            "username": self.username, "password": self.password, "_xsrf": self.http.cookies.get("_xsrf")})
        assert answer.ok and "/hub/login" not in answer.url, f"{self.username} could not log in: {answer.url}"

    def wait_for_lab(self) -> None:
        """Until JupyterLab answers at /user/<name>/lab (the first visit also gets the server's OAuth cookie)."""
        deadline = time.monotonic() + SPAWN_S
        while time.monotonic() < deadline:
            answer = self.get(f"/user/{self.username}/lab")
            if answer.ok and answer.url.endswith(f"/user/{self.username}/lab"):
                return
            time.sleep(1)
        raise AssertionError(f"{self.username}'s server did not start within {SPAWN_S:g} s")


def as_user(username: str, *argv: str, hub: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a command as the user, with their server's environment (what a JupyterLab terminal of theirs has)."""
    home = pwd.getpwnam(username).pw_dir
    env = [f"{k}={v}" for k, v in {**hub["user_env"], "HOME": home}.items()]
    return subprocess.run(["runuser", "-u", username, "--", "env", *env, *argv], cwd=cwd or home,
                          capture_output=True, text=True, timeout=120)


def home(username: str) -> Path:
    return Path(pwd.getpwnam(username).pw_dir)


def adopt_orphans(on: bool) -> None:
    """While on, the orphans of this process's descendants become its children (a child subreaper), not PID 1's.

    A process whose parent is killed first (a kernel of a server that `stop` kills) is re-parented; where PID 1 never
    collects its orphans' exit status (CI's machine, a container without an init), its zombie would stay, run by a
    student's uid, for as long as the machine runs. Adopted, the test collects it (collect_zombies) before it looks."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def collect_zombies() -> None:
    """Collect the exit status of this process's children that have ended (the orphans it adopted among them)."""
    for child in psutil.Process().children():
        if child.status() == psutil.STATUS_ZOMBIE:
            os.waitpid(child.pid, 0)


@pytest.fixture(scope="module")
def hub() -> Iterator[dict]:
    """The hub, started as `make hub` starts it; stopped and purged at the end whatever happened."""
    if lacks := server.missing_parts():
        if os.environ.get("HUB_TEST_REQUIRED") == "1":
            pytest.fail(f"the hub test is required here (HUB_TEST_REQUIRED=1) but it needs {'; '.join(lacks)}")
        pytest.skip(f"the hub test needs {'; '.join(lacks)}: {HOW_TO_ENABLE}")
    scratch = Path(tempfile.mkdtemp(prefix="ddp-hub-test-"))
    os.chmod(scratch, 0o755)  # the users' homes go below it
    lacking = server.unreachable()
    opened = {p: p.stat().st_mode for p in lacking}
    for path, mode in opened.items():
        os.chmod(path, mode | lacking[path])
    tag = os.urandom(2).hex()
    roster_file = scratch / "roster.csv"
    roster_file.write_text(f"username,name,role\nhubt{tag}-a,Alyssa,student\nhubt{tag}-b,Ben,student\n"
                      f"hubt{tag}-i,Eva,instructor\n")
    (scratch / "home").mkdir(mode=0o755)
    modes = {p.name: p.lstat().st_mode for p in ROOT.iterdir()}
    hub_dir = scratch / "hub"
    adopt_orphans(True)
    try:
        state = server.start(roster_file, hub_dir, port=server.free_port(), ip="127.0.0.1", home_base=scratch / "home",
                             name=f"hubt{tag}", say=lambda line: None)
        state.update(dir=hub_dir, repo_modes_before=modes, a=f"hubt{tag}-a", b=f"hubt{tag}-b",
                     instructor=f"hubt{tag}-i")
        yield state
    finally:
        try:
            if (hub_dir / "private" / "state.json").exists():
                server.stop(hub_dir, purge=True, say=lambda line: None)
        finally:
            collect_zombies()
            adopt_orphans(False)
            for path, mode in opened.items():
                os.chmod(path, mode)
            subprocess.run(["rm", "-rf", str(scratch)], check=False)


@pytest.fixture(scope="module")
def alyssa(hub: dict) -> Visitor:
    """Student A, logged in through the hub, with a running server."""
    visitor = Visitor(hub, hub["a"])
    visitor.log_in()
    visitor.wait_for_lab()
    return visitor


@pytest.fixture(scope="module")
def instructor(hub: dict) -> Visitor:
    """The instructor, logged in through the hub (no server of their own started: formgrader is a service)."""
    visitor = Visitor(hub, hub["instructor"])
    visitor.log_in(then="/hub/home")
    return visitor


@pytest.fixture(scope="module")
def submitted(hub: dict, alyssa: Visitor) -> Path:
    """The instructor releases lab 00; A fetches it and submits it untouched, through A's server as the
    Assignments tab does (no new Python process: quicker than nbgrader's commands). A's fetched notebook."""
    server.release(LAB, hub["dir"])
    alyssa.assignments("fetch", hub["course_id"])
    [notebook] = sorted((home(hub["a"]) / LAB).glob("*.ipynb"))
    alyssa.assignments("submit", hub["course_id"])
    return notebook


FORGED_STAMP, LINKED_STAMP, ROOT_LINK_STAMP = (f"{y}-01-01 00:00:00.000000 UTC" for y in (2099, 2098, 2097))


@pytest.fixture(scope="module")
def attacks(hub: dict, submitted: Path) -> dict:
    """What A tried in the issue (#34), from A's own shell: a submission in B's name dated 2099 (its notebook A's
    own), one of A's own whose notebook is a link to the solution, and one that is a link to `/`; then B fetches
    and submits lab 00 from B's shell (nbgrader's commands, what the Assignments tab runs). Each entry's name."""
    inbound = Path(hub["exchange"], hub["course_id"], "inbound")
    forged = inbound / f"{hub['b']}+{LAB}+{FORGED_STAMP}+forged"
    linked = inbound / f"{hub['a']}+{LAB}+{LINKED_STAMP}+linked"
    root_link = inbound / f"{hub['a']}+{LAB}+{ROOT_LINK_STAMP}+root"
    script = (f'cp -r "$1" "$2" && echo "{FORGED_STAMP}" > "$2/timestamp.txt" && mkdir "$3" && '
              f'ln -s "$4" "$3/{submitted.name}" && echo "{LINKED_STAMP}" > "$3/timestamp.txt" && ln -s / "$5"')
    done = as_user(hub["a"], "sh", "-c", script, "sh", str(submitted.parent), str(forged), str(linked),
                   str(corpus.solution_notebook(LAB)), str(root_link), hub=hub)
    assert done.returncode == 0, f"A could not write into inbound/: {done.stderr}"
    for step in ("fetch_assignment", "submit"):
        done = as_user(hub["b"], "nbgrader", step, LAB, hub=hub)
        assert done.returncode == 0, f"B's nbgrader {step}: {done.stdout}{done.stderr}"
    [genuine] = [p for p in inbound.iterdir() if p.name.startswith(f"{hub['b']}+") and p != forged]
    return {"forged": forged, "linked": linked, "root_link": root_link, "b_genuine": genuine}


def test_a_logs_in_and_their_server_runs_the_course(hub: dict, alyssa: Visitor) -> None:
    """A's server runs as A, in A's home, bounded by its cgroup, with the course's kernel and the Assignments tab."""
    kernels = alyssa.get(f"/user/{hub['a']}/api/kernelspecs").json()["kernelspecs"]
    assert list(kernels) == ["ddp-course"], f"A's server offers the kernels {list(kernels)}"
    listed = alyssa.get(f"/user/{hub['a']}/assignments?course_id={hub['course_id']}").json()
    assert listed["success"], f"the Assignments tab's server side does not read the hub's exchange: {listed}"
    [group] = [p for p in limits.leftover_groups(hub["group_prefix"] + hub["a"])
               if (p / "memory.limit_in_bytes").exists() or (p / "memory.max").exists()]
    procs = [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    owners = {pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name for pid in procs}
    assert procs and owners == {hub["a"]}, f"A's cgroup holds {procs}, run by {owners}"
    limit = next(f for f in ("memory.limit_in_bytes", "memory.max") if (group / f).exists())
    assert int((group / limit).read_text()) == int(hub["memory_gb"] * (1 << 30))
    # The CPU quota (classroom/hub/limits.py): v2's cpu.max or v1's cpu.cfs_quota_us, where the machine has either.
    quotas = [(p / f).read_text().split()[0] for p in limits.leftover_groups(hub["group_prefix"] + hub["a"])
              for f in ("cpu.max", "cpu.cfs_quota_us") if (p / f).exists()]
    if Path(limits.MOUNT, "cpu", "cpu.cfs_quota_us").exists() or (group / "cpu.max").exists():
        expected = str(int(hub["cpus"] * limits.PERIOD_US))
        assert quotas == [expected], f"A's CPU quota: {quotas} (microseconds per period), expected [{expected}]"


def test_hub_status_shows_a_and_the_culler_runs(hub: dict, alyssa: Visitor) -> None:
    """`make hub-status` lists A's server and its memory; jupyterhub-idle-culler runs as a hub service."""
    report = server.status(hub["dir"])
    assert f"have a server running: {hub['a']}" in report and hub["group_prefix"] + hub["a"] in report, report
    culler = [pid for pid in hub_processes(hub) if "jupyterhub_idle_culler" in psutil.Process(pid).cmdline()]
    assert culler, "this hub's jupyterhub-idle-culler is not running"


def test_a_fetches_lab_00_and_submits(hub: dict, alyssa: Visitor, submitted: Path) -> None:
    """The Assignments tab lists lab 00 as submitted; the submission is in the exchange's inbound, by A's name."""
    listed = alyssa.get(f"/user/{hub['a']}/assignments?course_id={hub['course_id']}").json()["value"]
    assert {(a["assignment_id"], a["status"]) for a in listed} >= {(LAB, "submitted")}, listed
    assert submitted.stat().st_uid == pwd.getpwnam(hub["a"]).pw_uid
    inbound = Path(hub["exchange"], hub["course_id"], "inbound")
    assert [p.name for p in inbound.iterdir()] and all(p.name.startswith(f"{hub['a']}+{LAB}+")
                                                        for p in inbound.iterdir())


def test_b_cannot_read_a_or_the_answers(hub: dict, submitted: Path) -> None:
    """B's shell cannot read A's home or notebook, list the submissions (nbgrader hides each behind a random
    name in a folder others may write but not list), or read the solutions."""
    inbound = Path(hub["exchange"], hub["course_id"], "inbound")
    solution = corpus.solution_notebook(LAB)
    for argv in (["ls", str(home(hub["a"]))], ["cat", str(submitted)], ["ls", str(inbound)],
                 ["cat", str(solution)], ["ls", str(ROOT / "tests")]):
        result = as_user(hub["b"], *argv, hub=hub)
        assert result.returncode != 0 and "Permission denied" in result.stderr, f"B ran {argv}: {result.stdout[:200]}"


def test_the_exchange_is_roots_and_no_student_can_take_it_over(hub: dict, attacks: dict) -> None:
    """The exchange's folders are root's with classroom/hub/exchange.py's modes, and A, from A's shell, can rename,
    replace or add none of them, nor rename or change B's submission (the sticky bit of inbound/, its mode)."""
    root = Path(hub["exchange"])
    course = root / hub["course_id"]
    folders = {root: exchange.ROOT_MODE, **{course / sub: mode for sub, mode in exchange.MODES.items()}}
    found = {str(f): (f.lstat().st_uid, oct(f.lstat().st_mode & 0o7777)) for f in folders}
    assert found == {str(f): (0, oct(mode)) for f, mode in folders.items()}, found
    tries = [["mv", str(course), f"{root}/taken"], ["mkdir", f"{root}/other-course"],
             ["mv", str(course / "inbound"), f"{course}/taken"], ["mkdir", f"{course}/taken"],
             ["rm", "-rf", str(course / "outbound" / LAB)], ["mkdir", f"{course}/outbound/{LAB}-2"],
             ["touch", f"{course}/feedback/page.html"], ["chmod", "777", str(root)],
             ["mv", str(attacks["b_genuine"]), f"{course}/inbound/taken"], ["touch", f"{attacks['b_genuine']}/x"]]
    for argv in tries:
        result = as_user(hub["a"], *argv, hub=hub)
        assert result.returncode != 0, f"A ran {argv}"
        assert re.search("Permission denied|Operation not permitted", result.stderr), (argv, result.stderr)
    assert {str(f): (f.lstat().st_uid, oct(f.lstat().st_mode & 0o7777)) for f in folders} == found
    assert attacks["b_genuine"].is_dir() and (course / "outbound" / LAB).is_dir()


def test_only_instructors_reach_formgrader(hub: dict, alyssa: Visitor, instructor: Visitor) -> None:
    refused = alyssa.get("/services/formgrader/formgrader")
    assert refused.status_code == 403, f"a student reached formgrader: {refused.status_code} {refused.url}"
    listed = instructor.get("/services/formgrader/formgrader/api/assignments")
    assert listed.ok, f"the instructor was refused formgrader: {listed.status_code} {listed.url}"
    assert LAB in {a["name"] for a in listed.json()}


def test_instructor_grades_in_the_sandbox_and_a_fetches_feedback(hub: dict, submitted: Path, attacks: dict,
                                                                   alyssa: Visitor, instructor: Visitor,
                                                                   capsys) -> None:
    """hub-grade grades A's and B's own submissions, and refuses A's three others, saying so at its end and in the
    hub's log (both names for the forged one); A's feedback is that of A's own notebook, B's graded is B's."""
    server.grade(LAB, hub["dir"], options=Options(workers=2, fast=True))
    out = capsys.readouterr().out
    assert re.search(r"^grading 2 submissions .*, sandboxed \(", out, re.MULTILINE), out
    summary = out[out.index(f"collect refused 3 submissions of {LAB}"):]
    log = Path(hub["dir"], "logs", "hub.log").read_text()
    for said in (f"{attacks['forged'].name}: submitted in the name of {hub['b']} by {hub['a']}",
                 f"{attacks['linked'].name}: {attacks['linked'].name}/{submitted.name} is a symbolic link",
                 f"{attacks['root_link'].name}: {attacks['root_link'].name} is a symbolic link"):
        assert said in summary and said in log, f"{said!r} not reported:\n{summary}"
    collected = Path(hub["course_root"]) / "submitted"
    assert (collected / hub["b"] / LAB / "timestamp.txt").read_text().strip() != FORGED_STAMP
    copy = collected / hub["a"] / LAB / submitted.name
    assert not copy.is_symlink() and copy.read_bytes() == submitted.read_bytes()
    full = sum(corpus.test_cells(LAB).values())
    assert read_score(Path(hub["course_root"]), hub["b"], LAB) == (0.0, full), "B's own submission was not graded"
    listed = {a["name"]: a for a in instructor.get("/services/formgrader/formgrader/api/assignments").json()}
    assert listed[LAB]["num_submissions"] == 2, "formgrader does not show the graded submissions"
    assert listed[LAB]["status"] == "released", "formgrader cannot read the root-owned exchange"
    instructor.get("/services/formgrader/formgrader")  # the page sets formgrader's _xsrf cookie
    button = instructor.post(f"/services/formgrader/formgrader/api/submission/{LAB}/{hub['a']}/autograde").json()
    assert not button["success"] and "make hub-grade" in button["error"], f"formgrader's Autograde: {button}"
    assert list((Path(hub["course_root"]) / "autograded" / hub["a"] / LAB).glob("*.ipynb")), \
        "formgrader's refused Autograde removed the graded copy"
    alyssa.assignments("fetch_feedback", hub["course_id"])
    [page] = sorted((home(hub["a"]) / LAB / "feedback").glob(f"*/{submitted.stem}.html"))
    assert f"(Score: 0.0 / {full:.1f})" in page_text(page), page_text(page)[:300]
    assert f"{LAB}: 0 / {full:g} (graded)" in page_text(page), "the grading report is not in A's feedback page"
    assert page.stat().st_uid == pwd.getpwnam(hub["a"]).pw_uid


@pytest.mark.browser
def test_a_student_sees_lab_00_in_jupyterlab(hub: dict, submitted: Path, tmp_path_factory) -> None:
    """In Chromium: the hub's login page, A's JupyterLab, lab 00 (fetched) in the file browser, opened."""
    from tests.test_browser import CHROMIUM, HOW_TO_ENABLE, KERNEL  # skips here as there when no Chromium is found

    if not CHROMIUM:
        pytest.fail(f"no Chromium found: {HOW_TO_ENABLE}")
    from playwright.sync_api import sync_playwright

    shots = tmp_path_factory.mktemp("hub-screenshots")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(SPAWN_S * 1000)
            page.goto(f"http://127.0.0.1:{hub['port']}/hub/login")
            page.fill("#username_input", hub["a"])
            page.fill("#password_input", hub["passwords"][hub["a"]])
            page.click("#login_submit")
            page.wait_for_url(re.compile(f"/user/{hub['a']}/lab"))
            folder = page.locator(".jp-DirListing-item", has_text=LAB)
            folder.dblclick()
            page.locator(".jp-DirListing-item", has_text=submitted.name).dblclick()
            page.locator(".jp-Toolbar .jp-KernelName", has_text=KERNEL).wait_for()
            page.screenshot(path=shots / "hub-lab-00.png")
            title = page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current").inner_text()
        finally:
            browser.close()
    assert title.strip() == submitted.name, f"the open tab is {title!r}"


def hub_processes(hub: dict) -> list[int]:
    """The live processes that the hub started as root: its own, the proxy's, its services' (server.HUB_TAG)."""
    tag = server.Layout(hub["dir"].resolve()).load()[server.HUB_TAG]
    return tagged_processes(tag, variable=server.HUB_TAG)


def test_stop_removes_everything(hub: dict) -> None:
    users = [hub["a"], hub["b"], hub["instructor"], hub["grader"]]
    uids = {pwd.getpwnam(u).pw_uid for u in users}
    homes = [home(u) for u in users]
    state = server.Layout(hub["dir"].resolve()).load()
    tag = state[server.HUB_TAG]
    assert hub_processes(hub), "no process of the hub's own found before the stop"
    # The hub killed outright, as `stop` does once it has not ended STOP_S after SIGTERM (a busy machine): it cleans
    # nothing up itself, and its services (the idle culler, run as root) must not outlive the stop.
    os.kill(state["hub_pid"], signal.SIGKILL)
    server.stop(hub["dir"], purge=True, say=lambda line: None)
    collect_zombies()
    left = tagged_processes(tag, variable=server.HUB_TAG)
    assert not left, f"processes the hub started are left: {[psutil.Process(p).cmdline() for p in left]}"
    left = [u for u in users if roster.exists(u)]
    assert not left, f"users left: {left}"
    assert not [h for h in homes if h.exists()], "homes left"
    running = [p.pid for p in psutil.process_iter(["uids"])
               if p.info["uids"] and {p.info["uids"].real, p.info["uids"].effective} & uids]
    assert not running, f"processes of the hub's users left: {running}"
    assert not limits.leftover_groups(hub["group_prefix"]), "cgroups left"
    kept = hub["dir"] / "grades"
    assert [p.name for p in hub["dir"].iterdir()] == ["grades"], "the hub's folder (exchange, state, log) is left"
    assert sorted(p.name for p in kept.iterdir()) == ["gradebook.db", "grades.csv", "lms-grades.csv"]
    assert kept.stat().st_mode & 0o7777 == 0o700 and kept.stat().st_uid == 0
    assert not server.RECORD.exists(), "the venv still names the purged hub's folder"
    assert {p.name: p.lstat().st_mode for p in ROOT.iterdir()} == hub["repo_modes_before"]
