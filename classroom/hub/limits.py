"""One student's bounds: memory, tasks and CPU of their JupyterLab, its kernels and every rank they fork, together.

The memory and task bounds are the grading sandbox's cgroup (nbplumbing/cgroup.py: cgroup v1's memory and
pids hierarchies and its cpu group, or a v2 group); the CPU bound is a CFS quota in it (v1's cpu.cfs_quota_us, or
cpu.max of the v2 group): `cpus` = 2 lets a student's ranks use two cores' worth of time in every 100 ms, however
many ranks they start, so one student's 5-rank launch slows their own ranks, not the room's. A process and everything
it forks afterwards stay in the group (a student cannot write to /sys/fs/cgroup).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from nbplumbing.cgroup import MOUNT, Group

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
            cpu = _cpu_folder(group)
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

    def remove(self) -> None:
        """Kill what is left in the groups and remove them."""
        self.group.remove()

    def describe(self) -> str:
        return "memory, tasks and CPU" if self.cpu is not None else "memory and tasks (no CPU controller here)"


def _cpu_folder(group: Group) -> Path | None:
    """Where the CPU quota goes: the v2 group itself, or the v1 cpu group that Group makes beside its memory and pids
    groups; None where the machine has no cpu controller there."""
    if group.version == 2:
        folder, quota = group.folders[0], "cpu.max"
    elif len(group.folders) > 2:
        folder, quota = group.folders[2], "cpu.cfs_quota_us"
    else:
        return None
    return folder if (folder / quota).exists() else None


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
