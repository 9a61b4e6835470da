"""What a failed or hung launch says: the report of RankFailedError and of RankHangError (utils/launch.py).

A failure names the ranks that failed first, each with its own traceback (the launcher's frames left out, a
notebook cell named "Cell In[n]"), then those that failed only because a peer was gone. A hang asks every unfinished
rank for its stack (faulthandler, on SIGUSR1) and names, for each, the call and the line it is blocked on:

    rank 1: blocked in torch.distributed.recv, at Cell In[3], line 5: dist.recv(t, src=0)

>>> _plural([2]), _plural([0, 3])
('rank 2', 'ranks 0, 3')
>>> _is_consequence("RuntimeError: Connection closed by peer"), _is_consequence(None)
(True, False)
"""

from __future__ import annotations

import linecache
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import torch
import torch.multiprocessing as torch_mp

from utils.p2p_ledger import WAIT_ONCE
from utils.timeouts import HANG_BUDGET, HANG_LEDGER, STACK_DUMP_S

if TYPE_CHECKING:
    from utils.rank_files import Ranks

__all__ = ["SECOND_WAIT", "LaunchError", "RankFailedError", "RankHangError", "failure_report", "hang_budget",
           "hang_report", "where_blocked"]

_DUMP_POLL_S = 0.05  # how often to look for a hung rank's stack in its stderr log
# Frames in these folders are libraries' (torch, Python's own, utils/): a blocked rank's line is the first one outside.
_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(threading.__file__), os.path.dirname(__file__))

# The launcher's files: torch's process wrapper, utils/launch.py and this one. Their frames, the same in every launch,
# say nothing about the student's code: tracebacks leave them out.
_LAUNCHER_FILES = (sys.modules[torch_mp.start_processes.__module__].__file__,
                   os.path.join(os.path.dirname(__file__), "launch.py"), __file__)


class LaunchError(RuntimeError):
    """A launch that did not return a result from every rank."""

    def _render_traceback_(self) -> list[str]:
        """IPython's traceback of this error without the launcher's own frames.

        IPython calls this hook instead of formatting the traceback itself, in a notebook cell and in nbgrader's
        Validate report alike. The frames inside launch() say nothing about the student's code (the message holds
        the rank's own traceback, already trimmed), so the traceback goes from the student's line straight to it.
        """
        from IPython import get_ipython  # only IPython calls this hook

        return get_ipython().InteractiveTB.structured_traceback(type(self), self, _without_launcher(self.__traceback__))


class RankFailedError(LaunchError):
    """One or more ranks raised an exception or died. `ranks` lists them, the cause first."""

    def __init__(self, message: str, ranks: list[int]):
        super().__init__(message)
        self.ranks = ranks


class RankHangError(LaunchError):
    """The ranks did not all finish within the timeout. `blocked` maps each unfinished rank to where it was."""

    def __init__(self, message: str, blocked: dict[int, str]):
        super().__init__(message)
        self.blocked = blocked


@contextmanager
def hang_budget() -> Iterator[None]:
    """Run one launch against its submission's hang budget: refused at once (RankHangError) when the launches before
    it have already hung for $AUTOGRADER_HANG_BUDGET_S seconds; its own time is added when it hangs or is interrupted
    (nbgrader's cell timeout). So a submission that deadlocks everywhere is graded in bounded time with its other
    points (utils.timeouts.HANG_BUDGET_S). Without $AUTOGRADER_HANG_LEDGER (a student's own machine) it does nothing."""
    ledger = os.environ.get(HANG_LEDGER)
    if not ledger:
        yield
        return
    spent = sum(map(float, Path(ledger).read_text().split())) if os.path.exists(ledger) else 0.0
    if spent >= float(os.environ.get(HANG_BUDGET, 0)):
        raise RankHangError(f"not run: this submission's launches have already hung for {spent:.0f} s", {})
    started = time.monotonic()
    try:
        yield
    except (RankHangError, KeyboardInterrupt):
        with open(ledger, "a") as fh:
            fh.write(f"{time.monotonic() - started:.1f}\n")
        raise


def _without_launcher(tb: TracebackType | None) -> TracebackType | None:
    """A copy of the traceback chain `tb` without the entries of the launcher's files (the original is intact)."""
    kept = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename not in _LAUNCHER_FILES:
            kept.append(tb)
        tb = tb.tb_next
    trimmed = None
    for entry in reversed(kept):
        trimmed = TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def failure_report(ranks: Ranks) -> tuple[str, list[int]]:
    """(the message of RankFailedError, its ranks): the failed ranks, causes first (in full), then the ranks that
    failed because a peer did."""
    failed = ranks.failed()
    causes = [r for r in failed if not _is_consequence(ranks.traceback(r))] or failed
    # Of the causes, a rank killed by a signal comes first: it left no traceback to look at.
    causes.sort(key=lambda r: ranks.traceback(r) is not None)
    descriptions: dict[str, list[int]] = {}  # identical failures (an unsolved exercise, say) are shown once
    for rank in causes:
        descriptions.setdefault(_describe_failure(ranks, rank), []).append(rank)
    parts = [f"{_plural(same)}: {text}" for text, same in descriptions.items()]
    consequences = [r for r in failed if r not in causes]
    if consequences:
        parts.append("Then, because a peer was gone:\n" + "\n".join(
            f"  rank {r}: {ranks.traceback(r).strip().splitlines()[-1]}" for r in consequences))
    header = f"{_plural(causes)} failed"
    if ranks.stopped:
        header += f"; {_plural(sorted(ranks.stopped))} still running and stopped"
    return header + ".\n\n" + "\n\n".join(parts), causes + consequences


def _is_consequence(trace: str | None) -> bool:
    """Whether a rank's traceback only says that a peer disappeared (so the peer is the real cause)."""
    return trace is not None and re.search(r"Connection (closed|reset) by peer|Broken pipe", trace) is not None


def _describe_failure(ranks: Ranks, rank: int) -> str:
    code = ranks.processes[rank].exitcode
    trace = ranks.traceback(rank)
    if trace is not None:
        return f"raised an exception:\n{_name_cells(_trim_traceback(trace))}"
    if code < 0:
        return (f"killed by {signal.Signals(-code).name} (out of memory, or killed from outside)"
                + _tail(ranks.stderr(rank)))
    if code == 0:
        return "ended without returning a result (it called sys.exit(), or was interrupted)"
    return f"exited with code {code}" + _tail(ranks.stderr(rank))


def _trim_traceback(trace: str) -> str:
    """Drop the launcher's own frames (torch's process wrapper and _rank_main): they are the same every time."""
    frame = re.compile(r'^  File "(?P<file>[^"]+)".*\n(?:    .*\n)*', re.MULTILINE)
    return frame.sub(lambda m: "" if m["file"] in _LAUNCHER_FILES else m[0], trace)


def hang_report(ranks: Ranks, timeout: float, entry: str) -> tuple[str, dict[int, str]]:
    """Ask every unfinished rank for its stack (SIGUSR1 -> faulthandler), then kill them all and explain.

    Returns (the message of RankHangError, {rank: where it was blocked}). `entry` is the name of the function each
    rank process starts in (the launcher's): the frames outside it are the parent's, copied by the fork.
    """
    hung = [rank for rank in ranks.alive() if not ranks.returned(rank)]
    for rank in hung:
        os.kill(ranks.processes[rank].pid, signal.SIGUSR1)
    stacks = _collect_stacks(ranks, hung)
    ranks.kill_all()
    blocked = {rank: where_blocked(stacks[rank], entry) for rank in hung}
    finished = [r for r in range(len(ranks.processes)) if r not in hung]
    lines = [f"{_plural(hung)} did not finish within {timeout:g} s. If they are waiting for each other, "
             "this is a deadlock: each waits for a message that no rank will send."]
    lines += [f"  rank {rank}: {where}" for rank, where in blocked.items()]
    if finished:
        lines.append(f"  ({_plural(finished)} finished.)")
    if any(_WAIT_CALL.search(where) for where in blocked.values()):
        lines.append(SECOND_WAIT)
    return "\n".join(lines), blocked


# A line that calls wait() on a request (a Work handle), e.g. "request.wait()" or "dist.isend(t, 1).wait()".
_WAIT_CALL = re.compile(r"\.wait\(")
# Nothing in the stack tells a second wait() from a message that never comes: the report names both.
SECOND_WAIT = f"A rank blocked in wait() may also be waiting a second time on one request: {WAIT_ONCE}"


def _collect_stacks(ranks: Ranks, hung: list[int]) -> dict[int, str]:
    """Wait until each hung rank has written its faulthandler dump to its stderr log, and return the dumps."""
    end = time.monotonic() + STACK_DUMP_S
    stacks: dict[int, str] = {}
    while True:
        stacks = {rank: _last_dump(ranks.stderr(rank)) for rank in hung}
        if all(stacks.values()) or time.monotonic() > end:
            return stacks
        time.sleep(_DUMP_POLL_S)


_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<name>.+)$')


@dataclass(frozen=True)
class _Frame:
    file: str
    line: int
    name: str

    def is_library(self) -> bool:
        return self.file.startswith(_LIBRARY_DIRS)


def _last_dump(stderr: str) -> str:
    """The last faulthandler stack in a rank's stderr ("... (most recent call first):" and its frames)."""
    start = stderr.rfind("most recent call first")
    return stderr[start:] if start >= 0 else ""


def where_blocked(dump: str, entry: str) -> str:
    """Turn a faulthandler dump into "in torch.distributed.recv, at Cell In[3], line 5: dist.recv(t, 1)".

    Only the frames inside the rank's `entry` function (see hang_report) count.
    """
    frames = [_Frame(m["file"], int(m["line"]), m["name"]) for m in map(_FRAME.match, dump.splitlines()) if m]
    if not frames:
        return "no stack could be read (the rank did not answer the stack request)"
    # Frames outside `entry` are the parent's, copied by the fork: only the ones inside belong to the rank.
    inside = next((i for i, frame in enumerate(frames) if frame.name == entry), len(frames))
    frames = frames[:inside]
    user = [i for i, frame in enumerate(frames) if not frame.is_library()]
    if not user:
        return f"blocked in {_library_call(frames)}, before the launched function started"
    caller = frames[user[0]]  # innermost frame of the user's code: the line that is waiting
    callee = _library_call(frames[: user[0]])
    where = f"at {_place(caller.file, caller.line)}: {linecache.getline(caller.file, caller.line).strip()}"
    return f"blocked in {callee}, {where}" if callee else f"blocked {where}"


def _library_call(frames: list[_Frame]) -> str | None:
    """Name the library function the user's line called, given the library frames innermost-first."""
    for frame in reversed(frames):  # outermost first: the function the user called, skipping decorators
        if frame.name not in ("wrapper", "inner"):
            if "torch/distributed" in frame.file.replace(os.sep, "/"):
                return f"torch.distributed.{frame.name}"
            return frame.name
    return None


def _place(file: str, line: int) -> str:
    """ "Cell In[7], line 3" for code typed in a notebook cell, "file.py, line 3" otherwise."""
    cell = _cell_label(file)
    return f"{cell}, line {line}" if cell else f"{file}, line {line}"


def _cell_label(file: str) -> str | None:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    label = shell.compile.format_code_name(file) if shell is not None else None
    return " ".join(label) if label else None


def _name_cells(text: str) -> str:
    """Replace the kernel's temporary file names of notebook cells in a traceback by "Cell In[n]"."""
    return re.sub(r'File "([^"]+)"', lambda m: _cell_label(m[1]) or m[0], text)


def _tail(text: str, lines: int = 20) -> str:
    text = text.strip()
    return "; its last output on stderr:\n" + "\n".join(text.splitlines()[-lines:]) if text else ""


def _plural(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
