"""The files through which a launch's ranks hand back what they print and what they return.

A launch's run folder holds, for every rank r, `rank<r>.out` and `rank<r>.err` (the rank's stdout and stderr,
redirected there) and `rank<r>.result` (its return value, pickled by value). The parent relays the `.out` files to
the notebook as they grow (OutputRelay), reads `.err` when a rank fails, and loads the results at the end.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import torch

__all__ = ["ByValuePickler", "OutputRelay", "load_result", "log_path", "result_path", "save_result"]


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
