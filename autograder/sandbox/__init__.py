"""The sandbox that every submission's kernel, and every rank it forks, is graded in (Linux).

    limits = Limits(memory_bytes=8 << 30)
    require()                                   # PipelineError naming what is missing, when no sandbox can be made
    box = Box.open(root, limits)                # a submission's scratch folder, cgroup and kernelspec
    box.serve(nbgrader_env({**env, **box.env()}, tag), folder, 1)  # the launch server (launch.py): as root
    run_nbgrader("autograde", ..., *box.args, env={**env, **box.env()}, tag=tag, wrap=confined(...))
    notes = box.close()                         # every process of it killed; "used more than 8 GB: stopped"

What the kernel may do (__main__.py, the kernel launcher, sets it up):
- read the Python environment (its lib/ and bin/, not the rest of a venv: the Makefile's exchange lives in
  .venv/share/), the course runtime utils/, the system's /usr, /lib, /etc, /proc and /sys; not even its own
  notebook folder (autograded/<student>/<assignment>/, its working folder), where the notebook it runs holds the
  hidden tests;
- write only its scratch folder (HOME and TMPDIR are in it; /dev/shm is a private one);
- reach only loopback (a network namespace of its own);
- use at most `memory_bytes` and `processes` tasks, kernel and ranks together (a cgroup).
The course root it runs in (the gradebook, source/, submitted/), the repository's solutions/, tests/ and
autograder/, other submissions and everything else are out of its reach. nbgrader itself runs outside (confined:
confine.py) and talks to the kernel over Unix sockets in a folder of their own (jupyter_client's ipc transport: TCP
on the grader's loopback is in another network namespace). The kernelspec's argv is launch.py's client: the
grader's launch server starts the kernel, since a confined process cannot make namespaces and mounts.

Without a sandbox (`--no-sandbox`) a Box still gives the scratch folder and the hang ledger (HANG_LEDGER), and
says "not sandboxed".
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.sandbox import landlock
from autograder.sandbox.namespaces import CONFIG_VARIABLE, NAMESPACES, unshare
from nbplumbing.cgroup import CgroupError, Group
from utils.timeouts import HANG_BUDGET, HANG_BUDGET_S, HANG_LEDGER

if TYPE_CHECKING:  # imported where it is used: `python -m autograder.sandbox.launch` imports this package first
    from autograder.sandbox.launch import LaunchServer

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout that holds autograder/ and utils/
KERNEL_NAME = "ddp-course-sandbox"
NOT_SANDBOXED = "not sandboxed"
MIN_LANDLOCK_ABI = 3  # ABI 1-2 cannot stop truncate(2) of a file it may only read


@dataclass(frozen=True)
class Limits:
    """The bounds of one submission: its kernel and all its ranks together."""

    memory_bytes: int = 8 << 30
    processes: int = 1024  # tasks, threads included: 5 ranks of torch use about 150
    scratch_bytes: int = 2 << 30  # what its scratch folder may hold (on disk), HOME and TMPDIR together
    hang_budget_s: float = HANG_BUDGET_S  # what its launches may spend hung, in all (utils/timeouts.py)

    def memory_words(self) -> str:
        """The memory bound as a person says it: "8 GB" (GiB, as the cgroup counts)."""
        return _words(self.memory_bytes)

    def scratch_words(self) -> str:
        return _words(self.scratch_bytes)


def _words(size: int) -> str:
    return f"{size / (1 << 30):g} GB"


def missing() -> list[str]:
    """What this machine lacks for the sandbox (empty: everything is there)."""
    if sys.platform != "linux":
        return [f"Linux (this is {sys.platform}): Landlock, namespaces and cgroups are Linux's"]
    lacks = []
    if (abi := landlock.abi_version()) < MIN_LANDLOCK_ABI:
        lacks.append(f"Landlock ABI {MIN_LANDLOCK_ABI}+ (Linux 6.2+ with landlock in its lsm= list; here: "
                     f"{f'ABI {abi}' if abi else 'none'})")
    pid = os.fork()
    if pid == 0:  # try the namespaces in a child that does nothing else
        try:
            unshare(NAMESPACES)
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        lacks.append("new mount, PID and network namespaces (unshare(2) needs root, or CAP_SYS_ADMIN)")
    try:
        Group.create(1 << 30, 16).remove()
    except CgroupError as exc:
        lacks.append(f"a cgroup with memory and pids limits: {exc}")
    return lacks


def require() -> None:
    """Raise PipelineError, saying what is missing and what --no-sandbox does, when no sandbox can be made here."""
    from nbplumbing.adapter import PipelineError  # not at the top: the kernel launcher imports this package

    if lacks := missing():
        raise PipelineError(refusal(lacks))


def describe(limits: Limits | None) -> str:
    """How the submissions run, for the first line of a grading run."""
    if limits is None:
        return f"{NOT_SANDBOXED.upper()} (--no-sandbox: every submission runs with the grader's rights)"
    return (f"sandboxed (Landlock ABI {landlock.abi_version()}, namespaces, a cgroup of {limits.memory_words()} and "
            f"{limits.processes} tasks each)")


def refusal(lacks: list[str]) -> str:
    """The one message with which grading refuses to run without a sandbox."""
    return ("cannot sandbox the grading here: it needs " + "; ".join(lacks) + ". Every submission's code runs "
            "during grading; without the sandbox it can read the answers and the gradebook, change them and leave "
            "processes behind. Run the grader as root on Linux 6.2+, or pass --no-sandbox to grade unconfined "
            f"(the summary and grades.csv then say {NOT_SANDBOXED!r}).")


def readable_runtime() -> list[Path]:
    """What any kernel of this Python may read: the interpreter, its libraries, the system's, and utils/."""
    paths = {Path(sys.base_prefix), Path(sys.executable).resolve().parent, Path(sys.prefix, "pyvenv.cfg")}
    paths |= {Path(sysconfig.get_path(k)).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib",
                                                                "scripts")}
    paths |= {Path(p) for p in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys",
                                "/dev")}
    return sorted(paths | {PACKAGE_ROOT / "utils"})


DEFAULT_LIMITS = Limits()
SCRATCH_POLL_S = 0.5  # how often the scratch folder is measured: at 200 MB/s it overshoots by 100 MB at most
SCRATCH_FILES = 100_000  # files past which the scratch folder counts as full too (each costs an inode and a look)


class ScratchWatch(threading.Thread):
    """Measures a submission's scratch folder every SCRATCH_POLL_S; past its bound, kills every process of the
    group (its kernel too: nbgrader then stops, and the report says why)."""

    def __init__(self, scratch: Path, limit: int, group: Group):
        super().__init__(name=f"scratch-watch {scratch}", daemon=True)
        self.scratch, self.limit, self.group = scratch, limit, group
        self.over = False
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(SCRATCH_POLL_S):
            if not scratch_within(self.scratch, self.limit):
                self.over = True
                self.group.kill_all()
                return

    def stop(self) -> bool:
        """Stop watching; return whether the bound was passed."""
        self._done.set()
        self.join()
        return self.over


def scratch_within(folder: Path, limit: int) -> bool:
    """Whether `folder` holds at most `limit` bytes on disk (allocated blocks: a sparse file costs what it uses) in
    at most SCRATCH_FILES files; stops counting once past either."""
    used, files, todo = 0, 0, [folder]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:  # removed meanwhile, or unreadable: what is not there takes no space
            continue
        for entry in entries:
            files += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                used += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
            if used > limit or files > SCRATCH_FILES:
                return False
    return True


@cache
def _font_caches() -> list[Path]:
    """matplotlib's font list of the grader's environment (its fontlist-*.json), if it has one."""
    try:
        import matplotlib  # the grader's own: read once per run
    except ImportError:
        return []
    return sorted(Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))


def _copy_font_cache(home: Path) -> None:
    """Give the kernel's fresh HOME the grader's font list: without it matplotlib scans every font on its first
    import (seconds of CPU in every submission, on a machine busy grading)."""
    if caches := _font_caches():
        folder = home / ".cache" / "matplotlib"
        folder.mkdir(parents=True)
        for path in caches:
            shutil.copy(path, folder / path.name)


JUPYTER_FOLDER = ".jupyter"  # in a submission's course root, which its kernel can neither read nor write


def jupyter_env(folder: Path) -> dict[str, str]:
    """The Jupyter paths of every nbgrader run on a submission: `folder` (the grader's own, out of the kernel's
    reach: the sandboxed kernelspec, an empty config folder) and the installed environment's and system's, which
    jupyter_core adds after it (sys.prefix/share/jupyter, /usr/share/jupyter, /etc/jupyter). Never the grader's
    HOME nor anything a kernel may write: nbconvert renders through the templates it finds there, and nbgrader
    runs the configs it finds there. `folder` is made (make_jupyter_folder) if it is not there."""
    config = str(make_jupyter_folder(folder) / "config")
    return {"JUPYTER_PATH": str(folder), "JUPYTER_DATA_DIR": str(folder), "JUPYTER_CONFIG_DIR": config,
            "JUPYTER_CONFIG_PATH": config, "JUPYTER_PREFER_ENV_PATH": "1"}


def make_jupyter_folder(folder: Path) -> Path:
    """Make `folder` nbgrader's own Jupyter folder (jupyter_env): an empty config folder holding jupyter_core's
    `migrated` marker. Without it every Jupyter application migrates IPython 3's files from the grader's HOME
    (~/.ipython) into the config folder at start, which reads a folder that is no Jupyter path of ours, and which a
    confined run (the feedback's, that may write only feedback/) cannot do: it stopped with a PermissionError."""
    (folder / "config").mkdir(parents=True, exist_ok=True)
    (folder / "config" / "migrated").touch()
    return folder


@dataclass
class Box:
    """One submission's grading environment: its scratch folder, and (sandboxed) its cgroup and kernelspec."""

    scratch: Path
    limits: Limits | None  # None: not sandboxed
    jupyter: Path  # nbgrader's own Jupyter folder (jupyter_env): the kernelspec, beside the scratch, not in it
    group: Group | None = None
    sockets: Path | None = None  # its connection file and Unix sockets: a short path (sun_path holds 108 bytes)
    launch: Path | None = None  # the launch server's socket, in a folder of its own (the kernel writes `sockets`)
    watch: ScratchWatch | None = None
    server: LaunchServer | None = None

    @classmethod
    def open(cls, root: Path, limits: Limits | None) -> Box:
        """Make the scratch folder in the course root `root` (and, with `limits`, the cgroup and kernelspec).

        If a step fails, what the earlier ones made outside `root` (the socket folder, the cgroup) is removed
        before the error goes on.
        """
        scratch = Path(root).resolve() / ".sb"
        for sub in ("home", "tmp"):
            (scratch / sub).mkdir(parents=True)
        box = cls(scratch, limits, jupyter=make_jupyter_folder(Path(root).resolve() / JUPYTER_FOLDER))
        if limits is None:
            return box
        try:
            _copy_font_cache(scratch / "home")
            box.sockets = Path(tempfile.mkdtemp(prefix="ag-"))
            box.launch = Path(tempfile.mkdtemp(prefix="ag-launch-")) / "launch"
            box.group = Group.create(limits.memory_bytes, limits.processes)
            # Out of the scratch folder: the kernel may write there, and nbgrader must not find its kernel there.
            spec = box.jupyter / "kernels" / KERNEL_NAME
            spec.mkdir(parents=True)
            argv = [sys.executable, "-m", "autograder.sandbox.launch", str(box.launch), "-f", "{connection_file}"]
            (spec / "kernel.json").write_text(json.dumps({
                "argv": argv, "display_name": "Python (DDP course, sandboxed grading)", "language": "python",
                "interrupt_mode": "signal", "env": {"PYTHONPATH": str(PACKAGE_ROOT)}}))
            box.watch = ScratchWatch(scratch, limits.scratch_bytes, box.group)
            box.watch.start()
        except BaseException:
            box.close()
            raise
        return box

    @property
    def args(self) -> list[str]:
        """nbgrader's options: the sandboxed kernelspec, over Unix sockets in `sockets`."""
        if self.limits is None:
            return []
        return ["--Execute.kernel_name=" + KERNEL_NAME, "--KernelManager.transport=ipc",
                f"--KernelManager.ip={self.sockets / 'k'}",
                f"--KernelManager.connection_file={self.connection_file}"]

    def env(self) -> dict[str, str]:
        """nbgrader's environment: where the kernelspec and connection files are, and the kernel's settings."""
        budget = HANG_BUDGET_S if self.limits is None else self.limits.hang_budget_s
        env = {**jupyter_env(self.jupyter), HANG_LEDGER: str(self.scratch / "hung-seconds"),
               HANG_BUDGET: f"{budget:g}"}
        if self.limits is None:
            return env
        inside = {"HOME": str(self.scratch / "home"), "TMPDIR": str(self.scratch / "tmp"), **env}
        config = {"cgroup": [str(f) for f in self.group.folders], "env": inside,
                  "memory_bytes": self.limits.memory_bytes,
                  "read": [str(p) for p in readable_runtime()],  # not notebook_folder: it holds the hidden tests
                  "write": [str(self.scratch), str(self.sockets), "/dev/null", "/dev/shm"]}
        return {**env, "JUPYTER_RUNTIME_DIR": str(self.sockets), CONFIG_VARIABLE: json.dumps(config)}

    @property
    def connection_file(self) -> Path:
        """The kernel's connection file, which nbgrader writes (box.args) and the launch server accepts."""
        assert self.sockets is not None, "not sandboxed: nbgrader starts its kernel itself"
        return self.sockets / "k.json"

    def serve(self, env: Mapping[str, str], folder: Path, launches: int) -> None:
        """Start the launch server (launch.py), sandboxed only: it starts at most `launches` kernels, one at a time,
        in `folder` (the notebooks' autograded folder), with the whole environment `env` (nbgrader's, which it would
        have passed on) and this box's launcher, for a confined nbgrader's client."""
        from autograder.sandbox.launch import LaunchServer

        if self.limits is None:
            return
        assert self.launch is not None and self.server is None
        environment = {**env, "PYTHONPATH": str(PACKAGE_ROOT)}  # the launcher is a module of the grader
        self.server = LaunchServer(self.launch, self.connection_file, folder, environment, launches)
        self.server.start()

    def close(self) -> list[str]:
        """Kill every process left in the cgroup and remove it and the scratch folder; return the notes."""
        if self.limits is None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            return [NOT_SANDBOXED]
        notes = []
        try:
            if self.server is not None:
                notes += [f"grader error: the kernel's launch was refused: {why}" for why in self.server.stop()]
            if self.watch is not None and self.watch.stop():
                notes.append(f"wrote more than {self.limits.scratch_words()} (or {SCRATCH_FILES} files) into its "
                             "scratch folder: stopped (the disk space of its kernel and ranks together is bounded)")
            if self.group is not None and self.group.oom_kills():
                notes.append(f"used more than {self.limits.memory_words()}: stopped (the memory of its kernel and "
                             "ranks together is bounded)")
            elif self.group is not None and self.group.limit_reached():
                # At the bound the kernel first reclaims what it can (the files its processes run from, among
                # others), which can slow them to a crawl before anything is killed: they then end at their time
                # limit, and this says why. A lab's files alone do not get here: its scratch is bounded far lower.
                notes.append(f"used more than {self.limits.memory_words()}: stopped at its time limit, slowed at "
                             "the memory bound of its kernel and ranks together")
        finally:
            if self.group is not None:  # None: open failed before it made the cgroup
                self.group.remove()
            shutil.rmtree(self.scratch, ignore_errors=True)
            for folder in (self.sockets, self.launch and self.launch.parent):
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)
        return notes
