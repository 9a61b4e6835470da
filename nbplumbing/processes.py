"""Every process a grading run starts, found and stopped: nbgrader, its kernel, and the ranks the kernel forks.

A run is marked by a tag in the environment of the nbgrader process it starts. Every descendant inherits the
environment, so a rank that left the process group or was re-parented to init is still found by its tag.
psutil reads other processes' environments on Linux, macOS and Windows alike (for processes of the same user).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable

import psutil

from utils.timeouts import KILL_WAIT_S

TAG_VARIABLE = "AUTOGRADER_GRADE_TAG"  # one nbgrader command and everything it starts
RUN_VARIABLE = "AUTOGRADER_RUN_TAG"  # one class grading run: every submission's processes


def new_tag(variable: str = TAG_VARIABLE) -> dict[str, str]:
    """A fresh tag, as the environment variable to add to the process that starts a run."""
    return {variable: uuid.uuid4().hex}


def tagged_processes(tag: str, variable: str = TAG_VARIABLE) -> list[int]:
    """The pids of live (not zombie) processes whose environment holds variable=tag."""
    pids = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(variable) == tag:
                pids.append(proc.pid)
        except (psutil.Error, OSError):  # gone, not ours, or not readable on this system
            continue
    return pids


def kill_tagged(tag: str, group: int | None = None, wait: float = KILL_WAIT_S,
                variable: str = TAG_VARIABLE) -> list[int]:
    """SIGKILL every process with variable=tag (and the process group `group`); return the pids killed.

    Keeps killing until none is left or `wait` seconds have passed: a process may fork while it dies.
    """
    if group is not None:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    return sorted(kill_until_gone(lambda: tagged_processes(tag, variable), wait))


def kill_until_gone(find: Callable[[], list[int]], wait: float, pause: float = 0.05) -> set[int]:
    """SIGKILL every pid that `find()` gives, again until it gives none or `wait` s have passed; return the killed."""
    killed: set[int] = set()
    end = time.monotonic() + wait
    while pids := find():
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        if time.monotonic() > end:
            break
        time.sleep(pause)
    return killed
