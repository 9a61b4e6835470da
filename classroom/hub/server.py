"""The class's hub on one server: start, stop, status, and the instructor's two steps (release a lab, grade it).

Everything lives in one folder (`--dir`, the Makefile's HUB_DIR; by default the last `start`'s, which the venv
remembers until `stop --purge`, else /srv/ddp-course-hub):

    <dir>/logs/hub.log       JupyterHub's log, with its proxy's, its services' and every server's start and stop
    <dir>/private/           root only: the hub's state (state.json), database, cookie secret, tokens, pid files
    <dir>/exchange/          nbgrader's exchange, root's folders (classroom/hub/exchange.py: students read the
                             released labs, drop submissions they cannot list, and reach only their own feedback;
                             none can rename, replace or add a folder)
    <dir>/grader/            the grader account's home and the class's course root: gradebook.db, submitted/,
                             autograded/, feedback/, and links to the repository's solutions/ and course/

While the hub runs, the repository's entries that hold answers (solutions/, tests/, benchmark/, autograder/, .git,
...: all but .venv/, utils/, jupyter/, classroom/ and course/) are closed to everyone outside the instructors'
group; `stop` gives them back the modes they had.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from autograder.run import Options, run_and_report
from classroom.collect import REFUSED
from classroom.exchange import exchange_step
from classroom.hub import exchange, feedback, limits, roster
from nbplumbing.adapter import REPO_ROOT, course_dir, nbgrader_config
from nbplumbing.processes import kill_tagged, kill_until_gone, new_tag

DEFAULT_DIR = Path("/srv/ddp-course-hub")
HUB_DIR_MODE = 0o755
VENV = Path(sys.prefix)
PROXY = VENV / "hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
NODE = PROXY.with_name("node")  # Node.js 20 from the npm registry (classroom/hub/proxy/package.json), not the system's
CONFIG = Path(__file__).with_name("jupyterhub_config.py")
OPEN_TO_STUDENTS = {".venv", "utils", "jupyter", "classroom", "course"}  # what a user's server runs on, and VENV
RECORD = VENV / "hub-dir"  # the --dir of this venv's last `start`: the other steps' default
KEPT = ("gradebook.db", "grades.csv", "lms-grades.csv")  # what `stop --purge` keeps of the course root, in grades/
START_S = 90.0  # the hub's start on a busy 2-core machine, proxy and services included (about 5-15 s)
STOP_S = 30.0
HUB_TAG = "DDP_HUB_TAG"  # the environment variable that marks the hub's own processes (state[HUB_TAG]: its value)


class HubError(RuntimeError):
    """The hub cannot do what was asked (the message says why and what to do)."""


class Layout:
    """The hub's folders under its --dir."""

    def __init__(self, root: Path):
        self.root = root
        self.private = root / "private"  # root's alone: the state, the tokens, the pid files
        self.state_file = self.private / "state.json"
        self.logs = root / "logs"
        self.log = self.logs / "hub.log"
        self.exchange = root / "exchange"
        self.grader_home = root / "grader"
        self.grades = root / "grades"  # what `stop --purge` keeps

    def load(self) -> dict:
        if not self.state_file.exists():
            raise HubError(f"no hub was started with --dir {self.root} (no {self.state_file})")
        return json.loads(self.state_file.read_text())

    def save(self, state: dict) -> None:
        self.state_file.write_text(json.dumps(state, indent=1))


def remembered_dir() -> Path:
    """The --dir of this venv's last `start` (until its `stop --purge`), else DEFAULT_DIR."""
    return Path(RECORD.read_text().strip()) if RECORD.exists() else DEFAULT_DIR


def missing_parts() -> list[str]:
    """What this machine lacks to run the hub (empty: nothing)."""
    lacks = []
    if sys.platform != "linux":
        lacks.append(f"Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        lacks.append("root (the hub makes system users and starts each one's server as that user)")
    if not (VENV / "bin" / "jupyterhub").exists():
        lacks.append(f"JupyterHub in {VENV} (make hub-install: requirements-hub.txt)")
    if not (PROXY.exists() and NODE.exists()):
        lacks.append(f"configurable-http-proxy and Node.js in {PROXY.parents[2]} (make hub-install: npm)")
    if not shutil.which("useradd"):
        lacks.append("useradd (the shadow utilities)")
    return lacks


def unreachable() -> dict[Path, int]:
    """The permission bits that other users lack on the way to the repository or to the venv's Python (a pyenv
    Python under /root, say), by folder: every user's server runs both. Each folder on the way must let them through
    (o+x), and the repository also be listed (o+r): it is on the servers' PYTHONPATH, and Python's importer lists each
    folder there, finding nothing in one it cannot read."""
    python = Path(os.path.realpath(sys.executable)).parent
    needed = {p: 0o001 for p in [python, *python.parents, *REPO_ROOT.parents]} | {REPO_ROOT: 0o005}
    return {p: bits & ~os.stat(p).st_mode for p, bits in sorted(needed.items()) if bits & ~os.stat(p).st_mode}


def blocked_message(blocked: dict[Path, int]) -> str:
    """Why the hub cannot start where the course's environment is closed to other users, and what to do. Never
    opening the closed folders: o+x on /root (a pyenv Python's home) would let every student read by path whatever
    is world-readable below it."""
    python = os.path.realpath(sys.executable)
    return (f"every user's server runs the course's environment ({VENV}, its Python {python}), but "
            f"{', '.join(map(str, blocked))} lets no other user through (or list the repository). Put the clone "
            f"where every user may enter (e.g. /srv/ddp-course) and give it a venv of its own built from the "
            f"system's Python 3.11, not this one: `make hub VENV=.venv-hub PYTHON=/usr/bin/python3.11 ROSTER=...` "
            f"(the venv's Python must be the system's: a venv made from {python} runs it)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def running(state: dict) -> bool:
    """Whether the hub process of this state is alive."""
    try:
        os.kill(state["hub_pid"], 0)
        return True
    except (KeyError, ProcessLookupError):
        return False


# ---- start ------------------------------------------------------------------------------------------------------


def start(roster_file: Path, hub_dir: Path = DEFAULT_DIR, port: int = 8000, ip: str = "0.0.0.0",
          home_base: Path = Path("/home"), name: str = "ddp-course", memory_gb: float = 4.0, cpus: float = 2.0,
          cull_s: int = 3600, say: Callable[[str], None] = print) -> dict:
    """Make the roster's users, set up the folders and start JupyterHub; return the state (with "passwords": the
    first-login password of each user made now, which is printed once and kept nowhere)."""
    if lacks := missing_parts():
        raise HubError("cannot start the hub here: it needs " + "; ".join(lacks))
    if blocked := unreachable():
        raise HubError(blocked_message(blocked))
    people = roster.read_roster(roster_file)
    layout = Layout(hub_dir.resolve())
    previous = layout.load() if layout.state_file.exists() else {}
    if previous and running(previous):
        raise HubError(f"a hub is running already with --dir {layout.root} (make hub-stop first)")
    other = Layout(remembered_dir())
    if other.root != layout.root and other.state_file.exists() and running(other.load()):
        raise HubError(f"this clone's hub is running with --dir {other.root}: stop it first (make hub-stop "
                       f"HUB_DIR={other.root}), or leave HUB_DIR out to use that one")
    if previous:  # a hub that died without `stop`: its repository modes first, and what it made stays recorded
        _open_repository(previous)
    for folder, mode in ((layout.root, HUB_DIR_MODE), (layout.private, 0o700), (layout.logs, 0o700)):
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, mode)
    course_id = nbgrader_config().CourseDirectory.course_id
    state = {"name": name, "repo": str(REPO_ROOT), "venv": str(VENV), "proxy": [str(NODE), str(PROXY)],
             "ip": ip, "port": port, "private": str(layout.private), "course_id": course_id,
             "exchange": str(layout.exchange), "course_root": str(layout.grader_home), "grader": f"{name}-grader",
             "instructors_group": f"{name}-instructors", "group_prefix": f"{name}-hub-",
             "students": [p.username for p in people if p.role == "student"],
             "instructors": [p.username for p in people if p.role == "instructor"],
             "memory_gb": memory_gb, "cpus": cpus, "cull_s": cull_s,
             "created_users": previous.get("created_users", []), "created_groups": previous.get("created_groups", []),
             "repo_modes": {}, **new_tag(HUB_TAG)}  # in the environment of the hub and its root-run services
    layout.save(state)  # from here on, `stop --purge` undoes whatever was made, even after a failure below
    RECORD.write_text(f"{layout.root}\n")
    passwords = _make_people(layout, state, people, home_base)
    _make_course_root(layout, state)
    exchange.make_exchange(layout.exchange, course_id)
    state["repo_modes"] = _close_repository(REPO_ROOT, state["instructors_group"])
    for key in ("hub_port", "proxy_api_port", "formgrader_port"):
        state[key] = free_port()
    here = Path(__file__).parent
    state["user_env"] = {"JUPYTER_CONFIG_PATH": f"{here / 'student'}:{REPO_ROOT / 'jupyter' / 'class'}",
                         "PATH": f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
                         "DDP_HUB_COURSE": course_id, "DDP_HUB_EXCHANGE": str(layout.exchange)}
    state["grader_env"] = {**state["user_env"], "HOME": str(layout.grader_home),
                           "JUPYTER_CONFIG_PATH": f"{here / 'grader'}:"
                                                  f"{REPO_ROOT / 'classroom' / 'instructor'}",
                           "DDP_HUB_COURSE_ROOT": str(layout.grader_home), "JUPYTERHUB_DEFAULT_URL": "/lab"}
    token = layout.private / "status_token"
    token.write_text(secrets.token_hex(32))
    os.chmod(token, 0o600)
    layout.save(state)
    _launch(layout, state)
    say(f"the hub is up: http://{socket.getfqdn() if ip == '0.0.0.0' else ip}:{port}/ "
        f"(log: {layout.log})")
    if passwords:
        say("first-login passwords (shown once, kept nowhere; each user can change theirs with `passwd` in a "
            "JupyterLab terminal):")
        for username, password in passwords.items():
            say(f"  {username:<32} {password}")
    return {**state, "passwords": passwords}


def _make_people(layout: Layout, state: dict, people: list[roster.Person], home_base: Path) -> dict[str, str]:
    """The groups, the grader account and a user per person (recorded in the state as each is made)."""
    group = state["instructors_group"]
    if roster.make_group(group):
        state["created_groups"].append(group)
    passwords = {}
    accounts = [(state["grader"], "the class's grader account (formgrader)", [group], layout.grader_home)]
    accounts += [(p.username, p.name, [group] if p.role == "instructor" else [], None) for p in people]
    for username, full_name, groups, home in accounts:
        if roster.exists(username):
            if groups:
                subprocess.run(["usermod", "--append", "--groups", group, username], check=True)
            continue
        secret = roster.make_user(username, full_name, home_base, groups, password=home is None, home=home)
        state["created_users"].append(username)
        layout.save(state)
        if secret:
            passwords[username] = secret
    return passwords


def _make_course_root(layout: Layout, state: dict) -> None:
    """The grader's home as the class's course root: links to the repository's solutions/ and course/."""
    config = nbgrader_config().CourseDirectory
    for step in ("source", "release"):
        link = layout.grader_home / config[f"{step}_directory"]
        if not link.is_symlink():
            link.symlink_to(REPO_ROOT / config[f"{step}_directory"])
    _give_to_grader(layout, state)


def _give_to_grader(layout: Layout, state: dict) -> None:
    """Everything in the course root to the grader account (root's steps write into it)."""
    user = pwd.getpwnam(state["grader"])
    for folder, _, files in os.walk(layout.grader_home):
        for path in [folder, *(os.path.join(folder, f) for f in files)]:
            os.lchown(path, user.pw_uid, user.pw_gid)


def _close_repository(repo: Path, group: str) -> dict[str, list[int]]:
    """Close what holds answers to all but the instructors' group; return each changed entry's (mode, gid)."""
    gid = grp.getgrnam(group).gr_gid
    saved = {}
    for entry in sorted(repo.iterdir()):
        if entry.name in OPEN_TO_STUDENTS or entry.is_symlink() or entry in (VENV, *VENV.parents):
            continue
        info = entry.lstat()
        saved[entry.name] = [info.st_mode & 0o7777, info.st_gid]
        os.chown(entry, -1, gid)
        os.chmod(entry, (info.st_mode & 0o7770 & ~0o020) | (0o050 if entry.is_dir() else 0o040))
    return saved


def _open_repository(state: dict) -> None:
    """Give the entries that _close_repository closed their modes and groups back."""
    for name, (mode, gid) in state["repo_modes"].items():
        if (entry := Path(state["repo"]) / name).exists():
            os.chown(entry, -1, gid)
            os.chmod(entry, mode)
    state["repo_modes"] = {}


def _launch(layout: Layout, state: dict) -> None:
    """Start JupyterHub in the background, its output into the log; wait until it answers."""
    env = {**os.environ, "DDP_HUB_STATE": str(layout.state_file), "PYTHONPATH": str(REPO_ROOT),
           HUB_TAG: state[HUB_TAG]}
    with open(layout.log, "ab") as log:
        proc = subprocess.Popen([str(VENV / "bin" / "jupyterhub"), "-f", str(CONFIG)], cwd=layout.private,
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state["hub_pid"] = proc.pid
    layout.save(state)
    deadline = time.monotonic() + START_S
    url = f"http://127.0.0.1:{state['port']}/hub/api"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HubError(f"JupyterHub exited ({proc.returncode}) while starting; the end of {layout.log}:\n"
                           + "\n".join(layout.log.read_text(errors="replace").splitlines()[-25:]))
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise HubError(f"JupyterHub did not answer on {url} within {START_S:g} s (see {layout.log})")


# ---- stop, status -----------------------------------------------------------------------------------------------


def stop(hub_dir: Path = DEFAULT_DIR, purge: bool = False, keep_grades: bool = True,
         say: Callable[[str], None] = print) -> None:
    """Stop the hub, every server and process of its users, remove its cgroups and give the repository its modes
    back. With purge: also remove the users and groups it made (and their homes) and the hub's folder, all but the
    gradebook and the grades' CSV files (KEPT), which stay in <dir>/grades/ unless not keep_grades."""
    layout = Layout(hub_dir.resolve())
    state = layout.load()
    if running(state):
        _end(state["hub_pid"])
    for pidfile in (layout.private / "proxy.pid", layout.private / "hub.pid"):
        if pidfile.exists() and pidfile.read_text().strip().isdigit():
            _end(int(pidfile.read_text()))
    if HUB_TAG in state:  # what the hub started as root and did not stop on SIGTERM (the idle culler did not)
        kill_tagged(state[HUB_TAG], variable=HUB_TAG)
    users = [u for u in state["created_users"] if roster.exists(u)]
    for username in users:
        kill_until_gone(lambda u=username: roster.user_processes(u), wait=10.0)
    for folder in reversed(limits.leftover_groups(state["group_prefix"])):
        pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()] if (folder / "cgroup.procs").exists() \
            else []
        kill_until_gone(lambda f=folder: [int(p) for p in (f / "cgroup.procs").read_text().split()], wait=10.0)
        folder.rmdir()
        if pids:
            say(f"stopped {len(pids)} processes left in {folder}")
    _open_repository(state)
    layout.save(state)
    say(f"the hub in {layout.root} is stopped")
    if purge:
        kept = _keep_grades(layout) if keep_grades else []
        for username in users:
            roster.remove_user(username)
        for group in state["created_groups"]:
            roster.remove_group(group)
        for entry in layout.root.iterdir():
            if entry == layout.grades and keep_grades:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        if not any(layout.root.iterdir()):
            layout.root.rmdir()
        if RECORD.exists() and remembered_dir() == layout.root:
            RECORD.unlink()
        say(f"removed {len(users)} users ({', '.join(users) or '-'}) with their homes (the grader's: the course root, "
            f"its submissions and feedback), {len(state['created_groups'])} groups, and the hub's exchange, log and "
            f"state in {layout.root}")
        if kept:
            say(f"kept {', '.join(kept)} in {layout.grades} (root's; `stop --purge-grades`, make hub-stop "
                f"HUB_ARGS=--purge-grades, removes them too)")


def _keep_grades(layout: Layout) -> list[str]:
    """Copy the course root's gradebook and grades (KEPT) into <dir>/grades/, root's alone; the names copied."""
    found = [name for name in KEPT if (layout.grader_home / name).is_file()]
    if found:
        layout.grades.mkdir(mode=0o700, exist_ok=True)
        for name in found:
            shutil.copyfile(layout.grader_home / name, layout.grades / name, follow_symlinks=False)
    return found


def _end(pid: int) -> None:
    """SIGTERM, then SIGKILL after STOP_S: JupyterHub stops the servers and services it started on SIGTERM."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                os.waitpid(pid, os.WNOHANG)
        except (ProcessLookupError, ChildProcessError, FileNotFoundError):
            return
        time.sleep(0.2)
    kill_until_gone(lambda: [pid] if Path(f"/proc/{pid}").exists() else [], wait=5.0)


def hub_api(state: dict, path: str) -> object:
    """GET a hub REST API path with the status token (read-only scopes); the decoded JSON."""
    token = Path(state["private"], "status_token").read_text().strip()
    request = urllib.request.Request(f"http://127.0.0.1:{state['port']}/hub/api{path}",
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def status(hub_dir: Path = DEFAULT_DIR) -> str:
    """What a lab administrator asks: is it up, where, who has a server running, what it uses, where the log is."""
    layout = Layout(hub_dir.resolve())
    state = layout.load()
    lines = [f"log: {layout.log}"]
    if not running(state):
        return "\n".join(["the hub is not running", *lines])
    lines.insert(0, f"the hub is running (pid {state['hub_pid']}) on http://{state['ip']}:{state['port']}/")
    users = hub_api(state, "/users")
    servers = sorted(u["name"] for u in users if u.get("servers"))
    lines.append(f"{len(servers)} of {len(users)} users have a server running: {', '.join(servers) or '-'}")
    for folder in limits.leftover_groups(state["group_prefix"]):
        usage = folder / "memory.usage_in_bytes" if (folder / "memory.usage_in_bytes").exists() \
            else folder / "memory.current"
        if usage.exists():
            lines.append(f"  {folder.name}: {int(usage.read_text()) / (1 << 30):.2f} GB of {state['memory_gb']:g} GB")
    return "\n".join(lines)


# ---- the instructor's steps -------------------------------------------------------------------------------------


def release(lab: str, hub_dir: Path = DEFAULT_DIR) -> str:
    """Hand a lab out through the hub's exchange (students: Assignments tab, Fetch); nbgrader's log."""
    layout = Layout(hub_dir.resolve())
    state = layout.load()
    run = exchange_step("release-lab", lab, Path(state["course_root"]), layout.exchange, exchange.RELEASE_OPTIONS)
    return run.log


def grade(lab: str, hub_dir: Path = DEFAULT_DIR, *, options: Options,
          say: Callable[[str], None] = print) -> None:
    """Collect a lab's submissions, grade them in the sandbox (`make autograde`'s grading, on the class's course
    root), and return the feedback through the exchange; formgrader shows the gradebook. The submissions that
    collect refused (classroom/collect.py) are listed last and in the hub's log. PipelineError when the grader
    failed on some submission (no feedback is returned then)."""
    layout = Layout(hub_dir.resolve())
    state = layout.load()
    root = Path(state["course_root"])
    refused: list[str] = []
    try:
        collected = exchange_step("collect", lab, root, layout.exchange).log.strip()
        say(collected)
        refused = [line[line.index(REFUSED):] for line in collected.splitlines() if REFUSED in line]
        if refused:
            with open(layout.log, "a") as log:
                log.writelines(f"[hub-grade {time.strftime('%Y-%m-%d %H:%M:%S')}] {lab}: {line}\n" for line in refused)
        run_and_report(course_dir(root, "submitted"), root, root, options)
        feedback.add_grading_reports(course_dir(root, "feedback"), lab)
        say(exchange_step("return-feedback", lab, root, layout.exchange).log.strip())
    finally:
        _give_to_grader(layout, state)
        if refused:
            say(f"collect refused {len(refused)} submissions of {lab} (neither collected nor graded; also in "
                f"{layout.log}):\n" + "\n".join(f"  {line}" for line in refused))
