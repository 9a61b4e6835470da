"""One student's bounds: memory, tasks and CPU of their JupyterLab, its kernels and every rank they fork, together.

The memory and task bounds are the grading sandbox's cgroup (autograder/sandbox/cgroup.py: cgroup v1's memory and
pids hierarchies, or a v2 group); the CPU bound is a CFS quota beside it (v1's cpu hierarchy, or cpu.max in the same
v2 group): `cpus` = 2 lets a student's ranks use two cores' worth of time in every 100 ms, however many ranks they
start, so one student's 5-rank launch slows their own ranks, not the room's. A process and everything it forks
afterwards stay in the group (a student cannot write to /sys/fs/cgroup).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from autograder.sandbox.cgroup import MOUNT, Group

log = logging.getLogger("classroom.hub")
PERIOD_US = 100_000  # the CFS period: the quota is cpus x this


@dataclass(frozen=True)
class StudentLimits:
    """The bounds of one student's server and all it starts."""

    memory_bytes: int = 4 << 30  # COURSE.md: a lab's kernel and ranks fit in 4 GB
    processes: int = 1024  # tasks, threads included (5 ranks of torch use about 150)
    cpus: float = 2.0  # cores' worth of CPU time


@dataclass
class Bounds:
    """A student's cgroups: the memory/pids group and the CPU folder (None where no CPU controller exists)."""

    group: Group
    cpu: Path | None

    @classmethod
    def create(cls, name: str, limits: StudentLimits) -> Bounds:
        """Make the (empty) groups of one server; OSError (CgroupError) where this machine cannot."""
        group = Group.create(limits.memory_bytes, limits.processes, name=name)
        try:
            cpu = _cpu_folder(group, name)
            if cpu is not None:
                quota = f"{int(limits.cpus * PERIOD_US)} {PERIOD_US}"
                if group.version == 2:
                    (cpu / "cpu.max").write_text(quota)
                else:
                    (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                    (cpu / "cpu.cfs_quota_us").write_text(quota.split()[0])
        except OSError:
            group.remove()
            raise
        return cls(group, cpu)

    def add(self, pid: int) -> None:
        """Move process `pid` (the server, before it runs anything) into the groups."""
        self.group.add(pid)
        if self.cpu is not None and self.group.version == 1:
            (self.cpu / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Kill what is left in the groups and remove them."""
        self.group.remove()
        if self.cpu is not None and self.group.version == 1:
            try:
                self.cpu.rmdir()
            except FileNotFoundError:
                pass

    def describe(self) -> str:
        return "memory, tasks and CPU" if self.cpu is not None else "memory and tasks (no CPU controller here)"


def _cpu_folder(group: Group, name: str) -> Path | None:
    """Where the CPU quota goes: the v2 group itself (if its cpu controller is on), or a new v1 cpu group."""
    if group.version == 2:
        folder = group.folders[0]
        return folder if (folder / "cpu.max").exists() else None
    if len(group.folders) > 2:  # the sandbox's Group made the v1 cpu group already (its share of the CPU)
        return group.folders[2]
    own = next((line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                if "cpu" in line.split(":", 2)[1].split(",")), None)
    root = next((MOUNT / d for d in ("cpu", "cpu,cpuacct") if (MOUNT / d / "cpu.cfs_quota_us").exists()), None)
    if own is None or root is None:
        return None
    folder = root / own.lstrip("/") / name
    folder.mkdir()
    return folder


def bounds_or_none(name: str, limits: StudentLimits) -> Bounds | None:
    """Bounds.create, or None with a warning in the hub's log where this machine has no usable cgroup."""
    try:
        return Bounds.create(name, limits)
    except OSError as exc:  # CgroupError, or a cpu hierarchy that refuses the quota
        log.warning("no per-student limits for %s: %s", name, exc)
        return None


def leftover_groups(prefix: str) -> list[Path]:
    """The folders of groups named prefix* under every hierarchy (a hub that was killed leaves its servers').
    os.walk, not glob: other programs' groups come and go meanwhile, and os.walk passes over what vanished."""
    return sorted(Path(folder, name) for folder, names, _ in os.walk(MOUNT) for name in names
                  if name.startswith(prefix))
