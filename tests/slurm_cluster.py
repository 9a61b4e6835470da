"""A one-node Slurm cluster of its own, for tests/test_slurm.py: `python -m tests.slurm_cluster FOLDER`.

It writes FOLDER/slurm.conf (this machine's cores and memory, one node named after this host at 127.0.0.1, free
ports, every state, spool, log and pid file in FOLDER) and a fresh munge key, then runs munged, slurmctld and slurmd
in the foreground as its children, until SIGTERM stops them (then it exits 0 once they have, 1 if one had to be
killed). Clients reach it with SLURM_CONF=FOLDER/slurm.conf.

It is the daemons' subreaper (PR_SET_CHILD_SUBREAPER): slurmd starts a slurmstepd per job step that leaves it
(a double fork), and where PID 1 does not collect the exit status of its orphans (this machine's init, a container's)
every ended step would stay a zombie. Adopted, they are collected here, and none outlives the cluster. Proctrack is
linuxproc and the task plugin none: a job stays in slurmd's cgroup, where the grader's sandbox makes its own.
"""

from __future__ import annotations

import ctypes
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scancel", "scontrol")
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
STOP_S = 20.0  # how long the daemons get to stop on SIGTERM before SIGKILL


def missing() -> list[str]:
    """What this machine lacks to run the cluster (empty: nothing)."""
    lacks = [] if os.geteuid() == 0 else ["root (slurmd runs jobs as their users)"]
    absent = [name for name in DAEMONS + CLIENTS if not shutil.which(name, path=_path())]
    return lacks + ([f"Slurm and munge ({', '.join(absent)} not found)"] if absent else [])


def _path() -> str:
    """PATH with the system's sbin folders, where Debian puts the daemons."""
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_name() -> str:
    """This host's short name: the cluster's one node, as Slurm's host lists name it."""
    return socket.gethostname().split(".")[0]


def client_environment(folder: Path) -> dict[str, str]:
    """What Slurm's commands need in their environment to use the cluster in `folder`."""
    return {"SLURM_CONF": str(folder / "slurm.conf"), "PATH": _path()}


def configure(folder: Path) -> dict[str, str]:
    """Write folder's slurm.conf and munge key; the environment in which Slurm's commands use this cluster."""
    munge = folder / "munge"
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir(mode=0o700, exist_ok=True)
    key = munge / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    node = node_name()
    memory_mb = math.floor(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.95)
    settings = {
        "ClusterName": "coursetest", "SlurmctldHost": f"{node}(127.0.0.1)",
        "SlurmctldPort": _free_port(), "SlurmdPort": _free_port(), "SlurmUser": "root", "SlurmdUser": "root",
        "AuthType": "auth/munge", "CredType": "cred/munge", "AuthInfo": f"socket={munge / 'munge.socket'}",
        "StateSaveLocation": folder / "state", "SlurmdSpoolDir": folder / "spool",
        "SlurmctldPidFile": folder / "slurmctld.pid", "SlurmdPidFile": folder / "slurmd.pid",
        "SlurmctldLogFile": folder / "slurmctld.log", "SlurmdLogFile": folder / "slurmd.log",
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "MpiDefault": "none",
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_CPU", "SchedulerType": "sched/builtin",
        "JobAcctGatherType": "jobacct_gather/none", "AccountingStorageType": "accounting_storage/none",
        "ReturnToService": 2, "MailProg": "/bin/true",
    }
    lines = [f"{name}={value}" for name, value in settings.items()] + [
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    (folder / "slurm.conf").write_text("\n".join(lines) + "\n")
    return client_environment(folder)


def run(folder: Path) -> int:
    """Start the daemons, collect every child and adopted orphan until SIGTERM, then stop the daemons; 0 if they
    stopped on SIGTERM, 1 if one had to be killed or ended by itself before."""
    folder = folder.resolve()
    env = {**os.environ, **configure(folder)}
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    munge = folder / "munge"
    commands = {
        "munged": ["munged", "--foreground", "--force", f"--socket={munge / 'munge.socket'}",
                   f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                   f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"],
        "slurmctld": ["slurmctld", "-D", "-i"],
        "slurmd": ["slurmd", "-D"],
    }
    daemons: dict[str, subprocess.Popen] = {}
    clean = True
    with (folder / "daemons.out").open("ab") as log:
        for name in DAEMONS:
            daemons[name] = subprocess.Popen(commands[name], env=env, stdout=log, stderr=subprocess.STDOUT)
            if name == "munged":
                _wait_for(munge / "munge.socket", daemons[name])
        while not stopping:
            _collect_zombies(exclude={d.pid for d in daemons.values()})
            if any(d.poll() is not None for d in daemons.values()):
                clean = False
                break
            time.sleep(0.2)
        for name in reversed(DAEMONS):  # slurmd first: it stops its steps, then the controller, then munge
            daemon = daemons[name]
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(timeout=STOP_S)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
                    clean = False
    return 0 if clean and not _end_the_rest() else 1


def _wait_for(socket_path: Path, daemon: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not socket_path.exists():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"munged did not make its socket {socket_path} (exit status {daemon.poll()})")
        time.sleep(0.05)


def _collect_zombies(exclude: set[int]) -> None:
    """Collect the exit status of this process's ended children (adopted orphans among them), but `exclude`'s."""
    for child in psutil.Process().children():
        if child.pid not in exclude and child.status() == psutil.STATUS_ZOMBIE:
            os.waitpid(child.pid, 0)


def _end_the_rest() -> list[int]:
    """Once the daemons have stopped: kill whatever adopted process still runs (a step slurmd left) and collect
    every child; the pids that were still running."""
    left = [c for c in psutil.Process().children() if c.status() != psutil.STATUS_ZOMBIE]
    for child in left:
        child.kill()
    psutil.wait_procs(psutil.Process().children(), timeout=STOP_S)
    return [c.pid for c in left]


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
