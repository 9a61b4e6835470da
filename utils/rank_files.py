"""The files through which a launch's ranks hand back what they print and what they return.

A launch's run folder holds, for every rank r, `rank<r>.out` and `rank<r>.err` (the rank's stdout and stderr,
redirected there) and `rank<r>.result` (its return value, pickled by value). The parent relays the `.out` files to
the notebook as they grow (OutputRelay), reads `.err` when a rank fails, and loads the results at the end.

A result is loaded as data only (DataUnpickler): numbers, strings, bytes, None, containers, torch and numpy values
and the course's own classes (utils/), never a class or a function of the notebook's. Unpickling runs what the
pickle names, and a rank runs the submission's code: an object whose `__reduce__` names a function would run it in
the kernel, and a tensor subclass would come back with its own `torch.equal`. Tensors come back as torch.Tensor.
Ranks holds the started processes and reads what each left behind; the launcher supervises them with it and
utils/launch_report.py explains their failures from it.
"""

from __future__ import annotations

import builtins
import io
import os
import pickle
import warnings
from multiprocessing.connection import wait as wait_for_exit
from typing import Any

import torch
import torch.multiprocessing as torch_mp

__all__ = ["ByValuePickler", "DataUnpickler", "OutputRelay", "Ranks", "load_result", "log_path", "result_path",
           "save_result"]

# What a result may name besides the course's classes: builtins' value types and exceptions, and what torch's and
# numpy's own values pickle to (a tensor's storage is read back by torch.load(weights_only=True): _storage_bytes).
_BUILTINS = frozenset({"complex", "slice", "range", "set", "frozenset", "bytearray", "list", "dict", "tuple", "int",
                       "float", "str", "bytes", "bool", "object"})
_DATA = frozenset({
    ("collections", "OrderedDict"), ("collections", "defaultdict"), ("copyreg", "_reconstructor"),
    ("torch", "Size"), ("torch", "device"), ("torch._utils", "_rebuild_tensor_v2"),
    ("numpy", "dtype"), ("numpy", "ndarray"), ("numpy._core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.multiarray", "scalar"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
})


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
    """Rank `rank`'s return value, as save_result wrote it, as data only (DataUnpickler).

    Raises TypeError, naming the rank and what it returned, for anything else.
    """
    with open(result_path(run_dir, rank), "rb") as f:
        try:
            return DataUnpickler(f).load()
        except pickle.UnpicklingError as error:
            raise TypeError(f"rank {rank} returned {error}: return plain values (numbers, strings, lists, dicts, "
                            "tuples, tensors), not objects of your own classes") from None


class DataUnpickler(pickle.Unpickler):
    """Unpickles data only (the module's docstring says what): anything else raises pickle.UnpicklingError."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch.storage" and name == "_load_from_bytes":
            return _storage_bytes
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _plain_parameter
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        found = super().find_class(module, name) if _allowed(module, name) else None
        if found is None or module.startswith("utils") and not _course_class(found):
            raise pickle.UnpicklingError(f"an object that names {module}.{name}")
        return found


def _course_class(found: Any) -> bool:
    """A class the course defines in utils/: not a function, nor a class a utils module imported (functools.partial)."""
    return isinstance(found, type) and getattr(found, "__module__", "").split(".")[0] == "utils"


def _allowed(module: str, name: str) -> bool:
    """Whether a result may name module.name (DataUnpickler)."""
    if module == "builtins":
        value = getattr(builtins, name, None)
        return name in _BUILTINS or isinstance(value, type) and issubclass(value, BaseException)
    return (module, name) in _DATA or module.split(".")[0] == "utils"


def _storage_bytes(data: bytes) -> Any:
    """A tensor's storage, as torch pickles it, read by torch's own data-only loader."""
    with warnings.catch_warnings():  # TypedStorage's deprecation: a warning on the cell's stderr fails a test
        warnings.simplefilter("ignore")
        return torch.load(io.BytesIO(data), weights_only=True)


def _plain_parameter(data: torch.Tensor, requires_grad: bool, backward_hooks: Any) -> torch.Tensor:
    """A parameter comes back as the plain tensor it holds (not a subclass), with its requires_grad."""
    return data.requires_grad_(requires_grad)


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
            trace = DataUnpickler(f).load()  # the rank wrote it, and the rank runs the submission's code
        return trace if isinstance(trace, str) else repr(trace)

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
