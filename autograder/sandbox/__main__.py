"""The grading kernel's launcher, which the grader's launch server (launch.py) starts as root for nbgrader's client.

    python -P -m autograder.sandbox python -m ipykernel_launcher -f CONNECTION_FILE

It reads its settings from AUTOGRADER_SANDBOX (JSON: the cgroup folders, what may be read and written, the kernel's
environment), then:

1. joins the submission's cgroup (memory and process bounds; the grader kills what is left in it at the end);
2. enters new mount, PID, network, IPC and UTS namespaces, and forks the namespace's init;
3. the init mounts a fresh /proc (only the submission's own processes) and a private /dev/shm, brings up
   loopback (the only interface of the new network namespace), and forks the kernel;
4. the kernel bounds its own data (RLIMIT_DATA), drops every capability, applies Landlock (landlock.py) and
   execs ipykernel; the init marks every other process as the first to stop at the memory bound.

When the kernel exits, the init exits with its status, and Linux kills every other process of the namespace:
nothing the submission started, a daemon in a new session included, outlives its kernel. The init and this
launcher pass on the kernel's exit status and ignore the SIGINT that interrupts a cell (the launch server signals
the whole process group for jupyter_client, and the kernel gets it directly); the launcher dies with the grader and
the init with the launcher (PR_SET_PDEATHSIG), which the launch server kills when nbgrader's client goes.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

from autograder.sandbox import landlock
from autograder.sandbox import namespaces as ns
from autograder.sandbox.launch import PARENT_VARIABLE

# The kernel's own data (heap and anonymous memory) stops at this share of the submission's bound: past it an
# allocation fails in the cell (MemoryError, or torch's "not enough memory") and the kernel lives on. The rest is
# left for its code, files and ranks; at the bound itself the out-of-memory killer stops a rank (_mark_victims).
KERNEL_DATA_SHARE = 7 / 8
VICTIM_SCAN_S = 0.2  # how often the init marks new processes as the out-of-memory killer's victims


def _ignore_interrupt() -> None:
    # A handler, not SIG_IGN: an ignored signal stays ignored across exec, and the kernel must see its SIGINT.
    signal.signal(signal.SIGINT, lambda *_: None)


def _exit_like(status: int) -> None:
    """Exit the way the waited-for child did (its code, or 128 + its signal, as a shell reports it)."""
    code = os.waitstatus_to_exitcode(status)  # -N for a signal N
    os._exit(code if code >= 0 else 128 - code)


def run_kernel(config: dict, argv: list[str]) -> None:
    """In the new namespaces' first child (PID 1): mount, bring up lo, fork the kernel, reap until it ends."""
    ns.die_with_parent()
    ns.mount("none", "/", None, ns.MS_REC | ns.MS_PRIVATE)  # nothing mounted here propagates out
    ns.mount("proc", "/proc", "proc", ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC)
    ns.mount("tmpfs", "/dev/shm", "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, "mode=1777")
    ns.loopback_up()
    kernel = os.fork()
    if kernel == 0:
        try:
            data = int(config["memory_bytes"] * KERNEL_DATA_SHARE)
            resource.setrlimit(resource.RLIMIT_DATA, (data, data))
            ns.drop_capabilities()
            abi = landlock.restrict(config["read"], config["write"])
            # Into nbgrader's log (grading-logs/): the instructor's evidence that this kernel ran confined.
            print(f"autograder sandbox: kernel confined (Landlock ABI {abi}; mount, PID and network namespaces; "
                  f"a cgroup of {config['memory_bytes'] / (1 << 30):g} GB)", flush=True)
            os.execve(argv[0], argv, {**os.environ, **config["env"]})
        except BaseException as exc:  # noqa: BLE001  (the kernel never started: say why in nbgrader's log)
            print(f"autograder sandbox: the kernel could not start: {exc!r}", file=sys.stderr, flush=True)
            os._exit(127)
    marked: set[int] = set()
    while True:  # PID 1 reaps every orphan of the namespace, until the kernel itself ends
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == kernel:
            _exit_like(status)
        if pid == 0:
            _mark_victims(kernel, marked)
            time.sleep(VICTIM_SCAN_S)


def _mark_victims(kernel: int, marked: set[int]) -> None:
    """Make every process of the namespace but the init and the kernel the out-of-memory killer's first choice.

    At the cgroup's memory bound Linux kills one process, the one with the highest score: a rank, then, and not the
    kernel, whose death would lose every cell nbgrader has run (nbclient gives up on a dead kernel).
    """
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in marked and int(entry) not in (1, kernel):
            try:
                Path("/proc", entry, "oom_score_adj").write_text("1000")
                marked.add(int(entry))
            except OSError:  # gone already
                pass


def main(argv: list[str]) -> None:
    """Die with the grader, join the cgroup, unshare, fork the init (run_kernel) and pass on its exit status."""
    # The grader's launch server started this: were the grader killed (its server with it), nothing else would end
    # the kernel. Its pid is checked after the call, in case it died before.
    ns.die_with_parent()
    if os.getppid() != int(os.environ.pop(PARENT_VARIABLE, os.getppid())):
        os._exit(128 + signal.SIGKILL)
    config = json.loads(os.environ.pop(ns.CONFIG_VARIABLE))
    os.environ.pop("PYTHONPATH", None)  # it only served to find this module; the kernel imports from its venv
    # ipykernel exits when its parent is no longer JPY_PARENT_PID: its parent is now the namespace's init, and
    # it dies with it anyway (a PID namespace ends with its init).
    os.environ.pop("JPY_PARENT_PID", None)
    for folder in config["cgroup"]:
        Path(folder, "cgroup.procs").write_text(str(os.getpid()))
    _ignore_interrupt()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))  # the init dies with us
    ns.unshare()
    init = os.fork()
    if init == 0:
        _ignore_interrupt()
        run_kernel(config, argv)
    _, status = os.waitpid(init, 0)
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
