"""Run a function on N ranks from a notebook cell, a script or a test, and get each rank's result back.

    import torch.distributed as dist
    from utils.launch import launch

    def hello() -> int:
        return 10 * dist.get_rank()

    launch(hello, world_size=4)          # -> [0, 10, 20, 30]

Each rank is a forked process with the default process group already initialised. On a machine with at least
one GPU per rank the group serves both kinds of tensor (torch's device-mapped backend "cpu:gloo,cuda:nccl"):
CUDA tensors travel over NCCL and CPU tensors over Gloo, so code that keeps some data on the CPU never breaks.
Everywhere else the group is plain Gloo. `rank_device()` says where a rank should put its data.

What can go wrong becomes an exception that says what happened, and no rank outlives the call:

- a rank raises            -> RankFailedError with that rank's traceback;
- a rank dies (SIGKILL...) -> RankFailedError naming the rank and the signal;
- the ranks hang           -> RankHangError naming, for every unfinished rank, the call and the line it
                              is blocked on (a deadlock report), after `timeout` seconds.

The same code runs as a script under torchrun (one node or several): there `launch` runs `fn` in the current
process, in the group torchrun set up, and returns every rank's result, gathered, on every rank.

Why fork and not torch.multiprocessing.spawn: spawn pickles the function, and a function defined in a
notebook cell cannot be pickled (it lives in the kernel's __main__). Fork copies the kernel instead. The
processes are started by torch's own start_processes (as Hugging Face accelerate's notebook_launcher
does), which also carries each rank's traceback back to us through an error file.
"""

from __future__ import annotations

import atexit
import faulthandler
import gc
import linecache
import os
import pickle
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import wait as wait_for_exit
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

__all__ = ["LaunchError", "RankFailedError", "RankHangError", "launch", "rank_device", "synchronize"]

_HOST = "127.0.0.1"
# The process group's own timeout must outlast ours: if Gloo timed out first, a deadlock would surface as
# one rank's "Timed out waiting for recv" traceback instead of the report that shows every rank.
_PG_TIMEOUT_MARGIN_S = 30.0
_FAILURE_GRACE_S = 1.0  # after a rank fails, how long the others get to fail on their own (and say why)
_STACK_DUMP_WAIT_S = 3.0  # how long a hung rank gets to write its stack after SIGUSR1
_POLL_S = 0.05
_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(threading.__file__), os.path.dirname(__file__))


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


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 60.0,
    backend: str = "auto",
    threads: int = 1,
    **kwargs: Any,
) -> list[Any]:
    """Run `fn(*args, **kwargs)` on `world_size` ranks and return the ranks' return values in rank order.

    Inside `fn` the default process group is initialised: use dist.get_rank(), dist.send(...), and so on.
    Return values travel back by value (pickled), so return numbers, lists, dicts or CPU tensors. What a
    rank prints appears here prefixed with "[rank r]"; what it writes to stderr is shown only if it fails.

    Args:
        fn: the function every rank runs; it may be defined in a notebook cell.
        world_size: number of ranks, at least 1.
        timeout: seconds the whole run may take; past that the ranks are treated as hung (RankHangError).
        backend: "gloo", "nccl" (one GPU per rank: NCCL for CUDA tensors, Gloo for CPU tensors), or "auto"
            ("nccl" when there are enough GPUs and torch has NCCL, else "gloo").
        threads: intra-op threads per rank; 1 lets a 2-core laptop run 4 ranks without thrashing.

    Raises:
        TypeError / ValueError: bad arguments, before any process starts.
        RankFailedError: a rank raised or died; the message holds its traceback.
        RankHangError: not every rank finished within `timeout`; the message says where each was blocked.
    """
    _check_arguments(fn, world_size, timeout, threads)
    # Grading only (autograder/sandbox/): once this submission's launches have spent the budget hung, the rest
    # fail at once, so a submission that deadlocks everywhere is graded in bounded time with its other points.
    ledger, budget = os.environ.get("AUTOGRADER_HANG_LEDGER"), float(os.environ.get("AUTOGRADER_HANG_BUDGET_S", 0))
    if ledger and os.path.exists(ledger) and (spent := sum(map(float, open(ledger).read().split()))) >= budget:
        raise RankHangError(f"not run: this submission's launches have already hung for {spent:.0f} s", {})
    started = time.monotonic()
    if "TORCHELASTIC_RUN_ID" in os.environ:
        torch.set_num_threads(threads)
        return _launch_under_torchrun(fn, world_size, args, kwargs, backend, timeout)
    backend = _choose_backend(backend, world_size)
    run_dir = tempfile.mkdtemp(prefix="ddp-launch-")
    # The parent owns the rendezvous port, so it is free by construction and no two launches collide. The
    # store's server starts only after the fork: a child forked while its event loop runs shares that loop's
    # sockets and epoll state, and under load the rendezvous then hangs now and then.
    listener = socket.create_server((_HOST, 0), backlog=128)
    relay = _OutputRelay(run_dir, world_size)
    ranks: _Ranks | None = None
    store: dist.TCPStore | None = None
    try:
        port = listener.getsockname()[1]
        setup = _RankSetup(backend, world_size, port, listener.fileno(), os.getpid(), run_dir, timeout, threads)
        context = _fork_ranks(world_size, _rank_main, (setup, fn, args, kwargs))
        ranks = _Ranks(context, run_dir)
        store = dist.TCPStore(  # serves the rendezvous for as long as it is referenced
            _HOST, port, is_master=True, wait_for_workers=False, timeout=_pg_timeout(timeout),
            master_listen_fd=listener.detach(),
        )
        _supervise(ranks, relay, deadline=time.monotonic() + timeout, timeout=timeout)
        return [_load_result(run_dir, rank) for rank in range(world_size)]
    except (RankHangError, KeyboardInterrupt):  # a hang, or nbgrader's interrupt at its cell timeout
        if ledger:
            with open(ledger, "a") as fh:
                fh.write(f"{time.monotonic() - started:.1f}\n")
        raise
    finally:
        if ranks is not None:
            ranks.kill_all()
            ranks.remove_error_files()
        relay.pump(final=True)
        relay.close()
        listener.close()
        # An exception's traceback keeps this frame alive: drop the store now, or its server lives on.
        store = None  # noqa: F841
        shutil.rmtree(run_dir, ignore_errors=True)


def _fork_ranks(world_size: int, main: Callable[..., None], args: tuple) -> torch_mp.ProcessContext:
    """Fork `world_size` processes running main(rank, *args), through torch's start_processes."""
    # The ranks must never garbage-collect objects they inherited: a C++ object of the parent's (an old
    # store, a process group) would run its destructor in the child, join a thread that does not exist
    # there, and abort the rank. Frozen objects are invisible to the collector, in the children too.
    gc.freeze()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns on every fork of a multi-threaded process (a Jupyter kernel always is);
            # the warning would land on the cell's stderr, which nbgrader scores as a failure.
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
            return torch_mp.start_processes(
                main, args=args, nprocs=world_size, join=False, daemon=True, start_method="fork"
            )
    finally:
        gc.unfreeze()  # the parent's own objects stay collectable


def _launch_under_torchrun(
    fn: Callable[..., Any], world_size: int, args: tuple, kwargs: dict, backend: str, timeout: float
) -> list[Any]:
    """torchrun already started one process per rank: join its group, run `fn` here, gather the results.

    torchrun watches its own processes, so there is no watchdog here: a hang ends with the process group's
    timeout (`timeout` plus a margin) as an error on the ranks, not with the launcher's deadlock report.
    """
    if world_size != int(os.environ["WORLD_SIZE"]):
        raise ValueError(f"launch asked for {world_size} ranks, but torchrun started {os.environ['WORLD_SIZE']}")
    if not dist.is_initialized():
        backend = _choose_backend(backend, int(os.environ["LOCAL_WORLD_SIZE"]), forking=False)
        if _uses_gpus(backend):
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend, timeout=_pg_timeout(timeout))
        atexit.register(_leave_group)  # the group is ours: close it when the script ends
    results: list[Any] = [None] * world_size
    dist.all_gather_object(results, fn(*args, **kwargs))
    return results


def _leave_group() -> None:
    """Close the group: a process that exits with its group still open can abort in the group's destructor
    ("terminate called without an active exception"). No barrier: a rank that failed must still exit at once,
    so that torchrun sees it and stops the others."""
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_device() -> torch.device:
    """The device this rank should put its tensors on: its own GPU when the group has NCCL, else the CPU."""
    if dist.is_initialized() and _uses_gpus(str(dist.get_backend())):
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device`: call it before reading a clock. A CUDA call (NCCL's too) returns
    as soon as the work is queued, so a clock read right after it measures the queueing, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------------------------- checks


def _check_arguments(fn: object, world_size: object, timeout: object, threads: object) -> None:
    if not callable(fn):
        raise TypeError(f"launch() needs a function to run on every rank, got {type(fn).__name__}: {fn!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, got {type(world_size).__name__}: {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    if sys.platform == "win32":
        raise LaunchError("launch() forks its ranks, which Windows cannot do: use WSL or a Linux/macOS machine")


_GPU_BACKEND = "cpu:gloo,cuda:nccl"  # torch's device-mapped backend: each tensor goes where its device says


def _choose_backend(backend: str, world_size: int, forking: bool = True) -> str:
    """The process group's backend string for "auto", "gloo" or "nccl"; refuse one that cannot work here.

    `world_size` ranks on this machine; `forking`: the ranks will be forked from this process (not torchrun's).
    """
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f'backend must be "auto", "gloo" or "nccl", got {backend!r}')
    # device_count() asks NVML and leaves CUDA uninitialised, so forking afterwards stays safe.
    gpus = torch.cuda.device_count()
    if backend == "auto":
        backend = "nccl" if gpus >= world_size and dist.is_nccl_available() else "gloo"
    if backend == "gloo":
        return backend
    if gpus < world_size:
        raise ValueError(f"backend 'nccl' needs one GPU per rank: {world_size} ranks, {gpus} GPUs")
    if forking and torch.cuda.is_initialized():
        raise LaunchError(
            "CUDA is already initialised in this process, and a forked rank cannot use it. Restart the "
            "kernel and launch before touching the GPU here (no tensor.cuda() in the notebook itself)."
        )
    return _GPU_BACKEND


def _uses_gpus(backend: str) -> bool:
    """Whether a group of this backend string moves CUDA tensors (and each rank owns a GPU)."""
    return "nccl" in backend


def _pg_timeout(timeout: float) -> timedelta:
    return timedelta(seconds=timeout + _PG_TIMEOUT_MARGIN_S)


# ------------------------------------------------------------------------------------------ in the rank


@dataclass(frozen=True)
class _RankSetup:
    """Everything a freshly forked rank needs to join the group."""

    backend: str
    world_size: int
    port: int
    listener_fd: int  # the parent's rendezvous socket, inherited through the fork: the rank closes its copy
    parent_pid: int
    run_dir: str
    timeout: float
    threads: int


def _rank_main(rank: int, setup: _RankSetup, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Body of one rank: isolate its output, join the group, run `fn`, and write the result to a file."""
    os.close(setup.listener_fd)
    _redirect_output(rank, setup.run_dir)
    _exit_with_parent(setup.parent_pid)
    torch.set_num_threads(setup.threads)
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(setup.world_size),
        LOCAL_WORLD_SIZE=str(setup.world_size), MASTER_ADDR=_HOST, MASTER_PORT=str(setup.port),
    )
    if _uses_gpus(setup.backend):
        torch.cuda.set_device(rank)
    store = dist.TCPStore(_HOST, setup.port, is_master=False, timeout=_pg_timeout(setup.timeout))
    dist.init_process_group(
        setup.backend, store=store, rank=rank, world_size=setup.world_size, timeout=_pg_timeout(setup.timeout)
    )
    result = fn(*args, **kwargs)
    _save_result(result, rank, setup.run_dir)
    # Wait for the others before leaving: a rank that exits while its peers are still connecting to it
    # breaks their Gloo connections ("connectFullMesh failed ... Connection closed by peer").
    dist.barrier()
    dist.destroy_process_group()


def _redirect_output(rank: int, run_dir: str) -> None:
    """Point this rank's stdout and stderr (Python's and the C++ libraries') at its own log files.

    The kernel's stdout object must not be used from a forked child, and anything a rank writes to the
    inherited stderr would land in the notebook cell as an error stream. SIGUSR1 makes the rank write its
    Python stack to the stderr log: that is how the watchdog sees where a hung rank is blocked.
    """
    for fd, path in ((1, _log_path(run_dir, rank, "out")), (2, _log_path(run_dir, rank, "err"))):
        log_fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(log_fd, fd)
        os.close(log_fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the rank
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)


def _exit_with_parent(parent_pid: int) -> None:
    """End this rank if the launching process dies (a killed kernel must not leave ranks behind)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class _ByValuePickler(pickle.Pickler):
    """Pickles GPU tensors as CPU copies: unpickling a CUDA tensor in the parent would initialise CUDA there."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return obj.cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _save_result(result: Any, rank: int, run_dir: str) -> None:
    """Write the result where the parent looks for it; the file appears whole (renamed into place) or not at all."""
    path = _result_path(run_dir, rank)
    try:
        with open(path + ".partial", "wb") as f:
            _ByValuePickler(f, pickle.HIGHEST_PROTOCOL).dump(result)
        os.replace(path + ".partial", path)
    except Exception as error:
        raise TypeError(
            f"rank {rank} returned a value of type {type(result).__name__} that cannot be sent back to the "
            f"launching process ({error}). Return plain values: numbers, strings, lists, dicts, tensors."
        ) from None


# ---------------------------------------------------------------------------------------- in the parent


def _log_path(run_dir: str, rank: int, stream: str) -> str:
    return os.path.join(run_dir, f"rank{rank}.{stream}")


def _result_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, f"rank{rank}.result")


def _load_result(run_dir: str, rank: int) -> Any:
    with open(_result_path(run_dir, rank), "rb") as f:
        return pickle.load(f)


class _Ranks:
    """The started rank processes, and what each one left behind when it ended."""

    def __init__(self, context: torch_mp.ProcessContext, run_dir: str):
        self.processes = context.processes
        self.error_files = context.error_files
        self.run_dir = run_dir
        self.stopped: set[int] = set()  # ranks we killed ourselves: not a cause of failure

    def alive(self) -> list[int]:
        return [rank for rank, p in enumerate(self.processes) if p.exitcode is None]

    def returned(self, rank: int) -> bool:
        """Whether the rank's function has returned (the rank may still be waiting for its peers to finish)."""
        return os.path.exists(_result_path(self.run_dir, rank))

    def failed(self) -> list[int]:
        """Ranks that ended on their own (not killed by us) without a result: an error, a signal, sys.exit()."""
        return [r for r, p in enumerate(self.processes)
                if p.exitcode is not None and (p.exitcode != 0 or not self.returned(r)) and r not in self.stopped]

    def wait(self, seconds: float) -> None:
        """Block until some rank ends or `seconds` pass."""
        sentinels = [self.processes[rank].sentinel for rank in self.alive()]
        if sentinels:
            wait_for_exit(sentinels, timeout=seconds)
        for p in self.processes:
            p.join(timeout=0)  # fills in exitcode for the ones that ended

    def stderr(self, rank: int) -> str:
        with open(_log_path(self.run_dir, rank, "err"), errors="replace") as f:
            return f.read()

    def traceback(self, rank: int) -> str | None:
        """The traceback the rank raised (torch's start_processes writes it to an error file), if any."""
        path = self.error_files[rank]
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            return pickle.load(f)

    def kill_all(self) -> None:
        for rank in self.alive():
            self.stopped.add(rank)
            self.processes[rank].kill()
        for p in self.processes:
            p.join()

    def remove_error_files(self) -> None:
        for path in self.error_files:
            if os.path.exists(path):
                os.remove(path)


def _supervise(ranks: _Ranks, relay: _OutputRelay, deadline: float, timeout: float) -> None:
    """Wait for every rank to succeed; raise as soon as one fails or the deadline passes."""
    while True:
        # Whether all have ended is read before looking for failures: a rank that fails in between is seen by
        # the check below (read after it, a last rank could end, failed, between the two and go unnoticed).
        finished = not ranks.alive()
        if ranks.failed():
            grace_end = time.monotonic() + _FAILURE_GRACE_S
            while ranks.alive() and time.monotonic() < grace_end:
                ranks.wait(_POLL_S)
            ranks.kill_all()
            raise RankFailedError(*_failure_report(ranks))
        if finished:
            return
        # Past the deadline, ranks whose function returned are only waiting to leave: not hung.
        if time.monotonic() > deadline and not all(ranks.returned(rank) for rank in ranks.alive()):
            raise RankHangError(*_hang_report(ranks, timeout))
        ranks.wait(_POLL_S)
        relay.pump()


def _failure_report(ranks: _Ranks) -> tuple[str, list[int]]:
    """Describe the failed ranks, causes first (in full), then the ranks that failed because a peer did."""
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


def _describe_failure(ranks: _Ranks, rank: int) -> str:
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
    launcher_files = (sys.modules[torch_mp.start_processes.__module__].__file__, __file__)
    frame = re.compile(r'^  File "(?P<file>[^"]+)".*\n(?:    .*\n)*', re.MULTILINE)
    return frame.sub(lambda m: "" if m["file"] in launcher_files else m[0], trace)


def _without_launcher(tb: TracebackType | None) -> TracebackType | None:
    """A copy of the traceback chain `tb` without the entries of this file (the original is left intact)."""
    kept = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != __file__:
            kept.append(tb)
        tb = tb.tb_next
    trimmed = None
    for entry in reversed(kept):
        trimmed = TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def _hang_report(ranks: _Ranks, timeout: float) -> tuple[str, dict[int, str]]:
    """Ask every unfinished rank for its stack (SIGUSR1 -> faulthandler), then kill them all and explain."""
    hung = [rank for rank in ranks.alive() if not ranks.returned(rank)]
    for rank in hung:
        os.kill(ranks.processes[rank].pid, signal.SIGUSR1)
    stacks = _collect_stacks(ranks, hung)
    ranks.kill_all()
    blocked = {rank: _where_blocked(stacks[rank]) for rank in hung}
    finished = [r for r in range(len(ranks.processes)) if r not in hung]
    lines = [f"{_plural(hung)} did not finish within {timeout:g} s. If they are waiting for each other, "
             "this is a deadlock: each waits for a message that no rank will send."]
    lines += [f"  rank {rank}: {where}" for rank, where in blocked.items()]
    if finished:
        lines.append(f"  ({_plural(finished)} finished.)")
    return "\n".join(lines), blocked


def _collect_stacks(ranks: _Ranks, hung: list[int]) -> dict[int, str]:
    """Wait until each hung rank has written its faulthandler dump to its stderr log, and return the dumps."""
    end = time.monotonic() + _STACK_DUMP_WAIT_S
    stacks: dict[int, str] = {}
    while True:
        stacks = {rank: _last_dump(ranks.stderr(rank)) for rank in hung}
        if all(stacks.values()) or time.monotonic() > end:
            return stacks
        time.sleep(_POLL_S)


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


def _where_blocked(dump: str) -> str:
    """Turn a faulthandler dump into "in torch.distributed.recv, at Cell In[3], line 5: dist.recv(t, 1)"."""
    frames = [_Frame(m["file"], int(m["line"]), m["name"]) for m in map(_FRAME.match, dump.splitlines()) if m]
    if not frames:
        return "no stack could be read (the rank did not answer the stack request)"
    # Frames outside _rank_main are the parent's, copied by the fork: only the ones inside belong to the rank.
    inside = next((i for i, frame in enumerate(frames) if frame.name == _rank_main.__name__), len(frames))
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


class _OutputRelay:
    """Copies what each rank prints to our stdout as it arrives, whole lines only, prefixed with the rank."""

    def __init__(self, run_dir: str, world_size: int):
        self._files = []
        for rank in range(world_size):
            for stream in ("out", "err"):
                open(_log_path(run_dir, rank, stream), "w").close()  # the ranks append to these
            self._files.append(open(_log_path(run_dir, rank, "out"), "rb"))  # noqa: SIM115
        self._partial = [b""] * world_size

    def pump(self, final: bool = False) -> None:
        for rank, f in enumerate(self._files):
            data = self._partial[rank] + f.read()
            complete, _, self._partial[rank] = data.rpartition(b"\n") if not final else (data, b"", b"")
            for line in complete.decode(errors="replace").splitlines():
                print(f"[rank {rank}] {line}")

    def close(self) -> None:
        for f in self._files:
            f.close()
