"""One cgroup per graded submission: a memory bound, a process bound and one share of the CPU (where the machine's
cgroups have the cpu controller) on its kernel and ranks together, the
count of the processes the kernel's out-of-memory killer stopped, and the means to end every process in it.

Two layouts are handled: cgroup v2 with the memory and pids controllers enabled in our own group's parent
(/sys/fs/cgroup, the unified hierarchy of current distributions), and the v1 `memory` and `pids` hierarchies
(each under its own /sys/fs/cgroup/<controller>). The group is made below the cgroup that this process is in,
so a grader that runs inside a container's or a batch job's cgroup stays inside it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from nbplumbing.processes import kill_until_gone

MOUNT = Path("/sys/fs/cgroup")


class CgroupError(OSError):
    """No cgroup with memory and pids limits can be made here (the message says why)."""


def _own_groups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    groups = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            groups[name] = path
    return groups


def _v2_parent() -> Path | None:
    """This process's v2 group, if memory and pids can be limited in a child of it."""
    own = _own_groups().get("")
    for mount in (MOUNT, MOUNT / "unified"):
        if own is None or not (mount / "cgroup.controllers").is_file():
            continue
        parent = mount / own.lstrip("/")
        if {"memory", "pids"} <= set((parent / "cgroup.controllers").read_text().split()):
            return parent
    return None


@dataclass
class Group:
    """A submission's cgroup: its folders (one for v2; memory and pids for v1) and its version."""

    folders: list[Path]
    version: int

    @classmethod
    def create(cls, memory_bytes: int, processes: int, name: str = "") -> Group:
        """Make a fresh group bounded to `memory_bytes` and `processes` (tasks: threads count too)."""
        name = name or f"autograder-{uuid.uuid4().hex[:12]}"
        try:
            if (parent := _v2_parent()) is not None:
                # In v2 a group with processes cannot enable controllers for children: the grader sits in its
                # parent, so the limits go on a fresh leaf.
                group = cls([parent / name], 2)
                group.folders[0].mkdir()
                group._write("memory.max", memory_bytes)
                group._write("memory.swap.max", 0, missing_ok=True)
                group._write("pids.max", processes)
                return group
            own = _own_groups()
            found = {c: MOUNT / c / own[c].lstrip("/") / name for c in ("memory", "pids", "cpu")
                     if c in own and (MOUNT / c).is_dir()}
            if "memory" not in found or "pids" not in found:
                raise CgroupError("no cgroup v2 with the memory and pids controllers, and no v1 memory and pids "
                                  f"hierarchies under {MOUNT}")
            # v1's cpu hierarchy, where there is one: a group of its own gives the submission one share of the CPU
            # (cpu.shares, equal for every group), however many processes it spins. v2 does that by itself where
            # the cpu controller is enabled for our group's children (cpu.weight, equal by default).
            folders = [found[c] for c in ("memory", "pids", "cpu") if c in found]
            group = cls(folders, 1)
            for folder in folders:
                folder.mkdir()
            group._write("memory.limit_in_bytes", memory_bytes)
            group._write("pids.max", processes)
            return group
        except CgroupError:
            raise
        except OSError as exc:
            raise CgroupError(f"cannot make a cgroup under {MOUNT} ({exc.strerror}: {exc.filename}); "
                              "the grader must run as root or in a cgroup delegated to its user") from exc

    def _file(self, name: str) -> Path:
        """A control file: v1 keeps the memory files in folders[0], the pids files in folders[1] (and cpu's in
        folders[2], when there is a cpu hierarchy)."""
        if self.version == 2:
            return self.folders[0] / name
        return self.folders[{"pids": 1, "cpu": 2}.get(name.split(".")[0], 0)] / name

    def _write(self, name: str, value: int | str, missing_ok: bool = False) -> None:
        path = self._file(name)
        if missing_ok and not path.exists():
            return
        path.write_text(str(value))

    def add(self, pid: int) -> None:
        """Move process `pid` (and the children it starts from now on) into the group."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        """The processes in the group now."""
        return sorted({int(p) for f in self.folders for p in (f / "cgroup.procs").read_text().split()})

    def _count(self, name: str, key: str) -> int:
        """A counter of a "key value" control file (memory.events, memory.oom_control); 0 when it is not there."""
        lines = self._file(name).read_text().splitlines()
        return int(dict(line.split() for line in lines if line.strip()).get(key, 0))

    def oom_kills(self) -> int:
        """How many processes of the group the out-of-memory killer stopped at its memory bound."""
        return self._count("memory.events" if self.version == 2 else "memory.oom_control", "oom_kill")

    def limit_reached(self) -> int:
        """How many times the group's memory reached its bound (each time the kernel reclaimed instead of giving)."""
        if self.version == 2:
            return self._count("memory.events", "max")
        return int(self._file("memory.failcnt").read_text())

    def kill_all(self, wait: float = 10.0) -> int:
        """SIGKILL every process in the group until none is left (or `wait` s passed); return how many were killed.

        A process cannot leave the group by itself (the sandbox cannot write to /sys/fs/cgroup), and the pids
        bound keeps a fork bomb from outrunning the loop.
        """
        return len(kill_until_gone(self.pids, wait, pause=0.02))

    def remove(self) -> None:
        """Kill what is left and remove the group's folders."""
        self.kill_all()
        for folder in self.folders:
            for _ in range(100):  # the last killed processes may still be leaving
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
