"""The hub's spawner: JupyterHub's LocalProcessSpawner (root starts each server as its user), inside cgroups.

Each server gets fresh groups (classroom/hub/limits.py) before it starts, and its process enters them between fork
and exec, before it runs a line of the user's: its kernels and every rank they fork inherit them. Where no cgroup
can be made (no root, a container without the controllers) the server starts without bounds and the hub's log
says so once per start. Stopping the server removes its groups, killing whatever the server left in them.
"""

from __future__ import annotations

import os
import uuid

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Float, Integer, Unicode

from classroom.hub.limits import Bounds, StudentLimits, bounds_or_none


class CourseSpawner(LocalProcessSpawner):
    """A LocalProcessSpawner whose server, kernels and ranks share one memory, task and CPU bound."""

    memory_gb = Float(StudentLimits.memory_bytes / (1 << 30), help="memory of one user's server and all it starts",
                      config=True)
    cpus = Float(StudentLimits.cpus, help="cores' worth of CPU time of one user's server and all it starts",
                 config=True)
    tasks = Integer(StudentLimits.processes, help="tasks (threads count) of one user's server", config=True)
    group_prefix = Unicode("ddp-hub-", help="the cgroups' names start with it (hub-stop removes leftovers)",
                           config=True)

    bounds: Bounds | None = None

    def limits(self) -> StudentLimits:
        return StudentLimits(int(self.memory_gb * (1 << 30)), self.tasks, self.cpus)

    def make_preexec_fn(self, name: str):
        """JupyterHub's set-uid step, after moving the child into the server's groups (still as root)."""
        become_user = super().make_preexec_fn(name)
        bounds = self.bounds

        def preexec() -> None:
            if bounds is not None:
                bounds.add(os.getpid())
            become_user()

        return preexec

    async def start(self):
        self._release()
        self.bounds = bounds_or_none(f"{self.group_prefix}{self.user.name}-{uuid.uuid4().hex[:8]}", self.limits())
        try:
            return await super().start()
        except BaseException:
            self._release()
            raise

    async def stop(self, now: bool = False) -> None:
        await super().stop(now)
        self._release()

    def _release(self) -> None:
        if self.bounds is not None:
            self.bounds.remove()
            self.bounds = None
