"""The files through which a launch's ranks hand back what they print and what they return.

A launch's run folder holds, for every rank r, `rank<r>.out` and `rank<r>.err` (the rank's stdout and stderr,
redirected there) and `rank<r>.result` (its return value, pickled by value). The parent relays the `.out` files to
the notebook as they grow (OutputRelay), reads `.err` when a rank fails, and loads the results at the end.
Ranks holds the started processes and reads what each left behind; the launcher supervises them with it and
utils/launch_report.py explains their failures from it.
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import wait as wait_for_exit
from typing import Any

import torch
import torch.multiprocessing as torch_mp

__all__ = ["ByValuePickler", "OutputRelay", "Ranks", "load_result", "log_path", "result_path", "save_result"]


class ByValuePickler(pickle.Pickler):
    """Pickles GPU tensors as CPU copies: unpickling a CUDA tensor in the parent would initialise CUDA there."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return obj.cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def save_result(result: Any, rank: int, run_dir: str) -> None:
    """Write the result where the parent looks for it; the file appears whole (renamed into place) or not at all."""
    path = result_path(run_dir, rank)
    try:
        with open(path + ".partial", "wb") as f:
            ByValuePickler(f, pickle.HIGHEST_PROTOCOL).dump(result)
        os.replace(path + ".partial", path)
    except Exception as error:
        raise TypeError(
            f"rank {rank} returned a value of type {type(result).__name__} that cannot be sent back to the "
            f"launching process ({error}). Return plain values: numbers, strings, lists, dicts, tensors."
        ) from None


def log_path(run_dir: str, rank: int, stream: str) -> str:
    """Where rank `rank` writes its stdout (`stream` "out") or stderr ("err")."""
    return os.path.join(run_dir, f"rank{rank}.{stream}")


def result_path(run_dir: str, rank: int) -> str:
    """Where rank `rank`'s return value appears once it has returned."""
    return os.path.join(run_dir, f"rank{rank}.result")


def load_result(run_dir: str, rank: int) -> Any:
    """Rank `rank`'s return value, as save_result wrote it."""
    with open(result_path(run_dir, rank), "rb") as f:
        return pickle.load(f)


class OutputRelay:
    """Copies what each rank prints to our stdout as it arrives, whole lines only, prefixed with the rank."""

    def __init__(self, run_dir: str, world_size: int):
        self._files = []
        for rank in range(world_size):
            for stream in ("out", "err"):
                open(log_path(run_dir, rank, stream), "w").close()  # the ranks append to these
            self._files.append(open(log_path(run_dir, rank, "out"), "rb"))  # noqa: SIM115
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


class Ranks:
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
        return os.path.exists(result_path(self.run_dir, rank))

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
        with open(log_path(self.run_dir, rank, "err"), errors="replace") as f:
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
