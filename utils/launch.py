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
(The reports, and these errors, are written in utils/launch_report.py.)

The same code runs as a script under torchrun (one node or several): there `launch` runs `fn` in the current
process, in the group torchrun set up, and returns every rank's result, gathered, on every rank. A task of Slurm's
`srun` is such a rank too, once `slurm_rank_environment` has set torchrun's variables from Slurm's
(utils.notebook_script does).

Why fork and not torch.multiprocessing.spawn: spawn pickles the function, and a function defined in a
notebook cell cannot be pickled (it lives in the kernel's __main__). Fork copies the kernel instead. The
processes are started by torch's own start_processes (as Hugging Face accelerate's notebook_launcher
does), which also carries each rank's traceback back to us through an error file.
"""

from __future__ import annotations

import atexit
import faulthandler
import gc
import os
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
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

from utils.launch_report import (
    LaunchError,
    RankFailedError,
    RankHangError,
    failure_report,
    hang_budget,
    hang_report,
)
from utils.nccl_rules import emulating
from utils.rank_files import OutputRelay, Ranks, load_result, log_path, save_result
from utils.timeouts import LAUNCH_S, process_group_s

__all__ = ["LaunchError", "RankFailedError", "RankHangError", "launch", "one_way_groups", "rank_device",
           "slurm_rank_environment", "synchronize"]

_HOST = "127.0.0.1"
_FAILURE_GRACE_S = 1.0  # after a rank fails, how long the others get to fail on their own (and say why)
_POLL_S = 0.05
_STARTED_BY = "COURSE_RANKS_STARTED_BY"  # "srun": slurm_rank_environment made this process a rank of a group
_ONE_WAY: dict[int, tuple[Any, list[Any]]] = {}  # one_way_groups(): id(default group) -> (it, its two groups)


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = LAUNCH_S,
    backend: str = "auto",
    threads: int = 1,
    emulate: str | None = None,
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
        emulate: "nccl": point-to-point calls follow NCCL's ordering rules on Gloo too (utils.nccl_rules; what
            would hang on GPUs raises NcclOrderError or hangs); None: as $COURSE_EMULATE says (unset: no emulation).

    Raises:
        TypeError / ValueError: bad arguments, before any process starts.
        RankFailedError: a rank raised or died; the message holds its traceback.
        RankHangError: not every rank finished within `timeout`; the message says where each was blocked.
    """
    _check_arguments(fn, world_size, timeout, threads)
    fn = emulating(fn, emulate)
    if "TORCHELASTIC_RUN_ID" in os.environ or _STARTED_BY in os.environ:
        torch.set_num_threads(threads)
        return _launch_under_torchrun(fn, world_size, args, kwargs, backend, timeout)
    backend = _choose_backend(backend, world_size)
    run_dir = tempfile.mkdtemp(prefix="ddp-launch-")
    # The parent owns the rendezvous port, so it is free by construction and no two launches collide. The
    # store's server starts only after the fork: a child forked while its event loop runs shares that loop's
    # sockets and epoll state, and under load the rendezvous then hangs now and then.
    listener = socket.create_server((_HOST, 0), backlog=128)
    relay = OutputRelay(run_dir, world_size)
    ranks: Ranks | None = None
    store: dist.TCPStore | None = None
    try:
        with hang_budget():  # grading only: once a submission's launches have hung long enough, the rest fail at once
            port = listener.getsockname()[1]
            setup = _RankSetup(backend, world_size, port, listener.fileno(), os.getpid(), run_dir, timeout, threads)
            context = _fork_ranks(world_size, _rank_main, (setup, fn, args, kwargs))
            ranks = Ranks(context, run_dir)
            store = dist.TCPStore(  # serves the rendezvous for as long as it is referenced
                _HOST, port, is_master=True, wait_for_workers=False, timeout=_pg_timeout(timeout),
                master_listen_fd=listener.detach(),
            )
            _supervise(ranks, relay, deadline=time.monotonic() + timeout, timeout=timeout)
            return [load_result(run_dir, rank) for rank in range(world_size)]
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
        raise ValueError(f"launch asked for {world_size} ranks, but {os.environ.get(_STARTED_BY, 'torchrun')} "
                         f"started {os.environ['WORLD_SIZE']}")
    if not dist.is_initialized():
        backend = _choose_backend(backend, int(os.environ["LOCAL_WORLD_SIZE"]), forking=False)
        if _uses_gpus(backend):
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend, store=_attempt_store(timeout), rank=int(os.environ["RANK"]),
                                world_size=world_size, timeout=_pg_timeout(timeout))
        atexit.register(_leave_group)  # the group is ours: close it when the script ends
    results: list[Any] = [None] * world_size
    dist.all_gather_object(results, fn(*args, **kwargs))
    return results


def _attempt_store(timeout: float) -> dist.Store:
    """The store of this torchrun attempt's group, at torchrun's MASTER_ADDR:MASTER_PORT.

    With a c10d rendezvous (--standalone too), torchrun's agent serves every attempt from one store of its own
    (TORCHELASTIC_USE_AGENT_STORE), which still holds what the ranks of an attempt that failed wrote there, their
    Gloo addresses among it, and torch adds no prefix per attempt: a restarted rank could read a dead rank's address
    before its successor writes its own, and fail to connect. So each attempt's keys get their own prefix. Without
    the agent's store, rank 0 serves a new one on a new port at every attempt.
    """
    addr, port, rank = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["RANK"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True):
        return dist.TCPStore(addr, port, is_master=rank == 0, timeout=_pg_timeout(timeout), multi_tenant=True)
    store = dist.TCPStore(addr, port, is_master=False, timeout=_pg_timeout(timeout))
    return dist.PrefixStore(f"attempt-{os.environ['TORCHELASTIC_RESTART_COUNT']}/", store)


def slurm_rank_environment(slurm: dict[str, str]) -> dict[str, str]:
    """torchrun's variables for a task of `srun` (one task per rank), from the step's environment `slurm`.

    RANK is SLURM_PROCID, WORLD_SIZE SLURM_NTASKS, LOCAL_RANK SLURM_LOCALID; the rendezvous (rank 0's store) is on
    the first node of SLURM_STEP_NODELIST, at MASTER_PORT if the job sets one, else at the first of the step's
    reserved ports (SLURM_STEP_RESV_PORTS, where the cluster's MpiParams reserve some), else at a port derived from
    the job and step ids. Raises KeyError naming a variable that srun sets, outside a step.

    >>> env = slurm_rank_environment({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
    ...     "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    ...     "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"})
    >>> env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"]
    ('3', '4', '1', '2', 'gpu07')
    """
    per_node = [int(count) for part in slurm["SLURM_STEP_TASKS_PER_NODE"].split(",")
                for count, _, times in [part.rstrip(")").partition("(x")] for _ in range(int(times or 1))]
    ports = slurm.get("SLURM_STEP_RESV_PORTS", "").partition("-")[0]
    port = slurm.get("MASTER_PORT") or ports or str(20000 + (int(slurm["SLURM_JOB_ID"]) * 8
                                                              + int(slurm["SLURM_STEP_ID"])) % 40000)
    return {"RANK": slurm["SLURM_PROCID"], "WORLD_SIZE": slurm["SLURM_NTASKS"], "LOCAL_RANK": slurm["SLURM_LOCALID"],
            "LOCAL_WORLD_SIZE": str(per_node[int(slurm["SLURM_NODEID"])]),
            "MASTER_ADDR": _first_host(slurm["SLURM_STEP_NODELIST"]), "MASTER_PORT": port, _STARTED_BY: "srun"}


def _first_host(hostlist: str) -> str:
    """The first host of a Slurm host list: "node[03-05,9],login1" -> "node03" (a prefix, a bracket, a suffix)."""
    first = re.match(r"[^,\[]*(\[[^\]]*\][^,\[]*)*", hostlist)[0]
    return re.sub(r"\[([^\],-]*)[^\]]*\]", r"\1", first)


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


def one_way_groups() -> list[dist.ProcessGroup]:
    """Two process groups of all the default group's ranks, made once per default group and kept: at N = 2, group
    i for the messages that rank i sends, [0 -> 1, 1 -> 0].

    Each group has connections of its own (a TCP connection per pair of ranks on Gloo, a communicator on NCCL), so
    the two directions' messages do not share one. Every rank must call it at the same point the first time:
    dist.new_group is a collective.
    """
    world = dist.group.WORLD
    if id(world) not in _ONE_WAY:  # the entry keeps `world` alive: its id cannot be reused
        _ONE_WAY[id(world)] = (world, [dist.new_group(), dist.new_group()])
    return _ONE_WAY[id(world)][1]


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
    """The process group's timeout, above ours (utils/timeouts.py): else a deadlock is one rank's Gloo timeout."""
    return timedelta(seconds=process_group_s(timeout))


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
    save_result(result, rank, setup.run_dir)
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
    for fd, path in ((1, log_path(run_dir, rank, "out")), (2, log_path(run_dir, rank, "err"))):
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


# ---------------------------------------------------------------------------------------- in the parent


def _supervise(ranks: Ranks, relay: OutputRelay, deadline: float, timeout: float) -> None:
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
            raise RankFailedError(*failure_report(ranks))
        if finished:
            return
        # Past the deadline, ranks whose function returned are only waiting to leave: not hung.
        if time.monotonic() > deadline and not all(ranks.returned(rank) for rank in ranks.alive()):
            raise RankHangError(*hang_report(ranks, timeout, _rank_main.__name__))
        ranks.wait(_POLL_S)
        relay.pump()
