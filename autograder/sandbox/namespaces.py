"""The Linux calls the sandbox makes through ctypes (glibc): unshare(2), mount(2), prctl(2), capset(2) and an ioctl."""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
from pathlib import Path

CONFIG_VARIABLE = "AUTOGRADER_SANDBOX"  # the launcher's settings (JSON), in the environment nbgrader passes on

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
_SIOCSIFFLAGS, _IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40
_CAPABILITY_VERSION_3 = 0x20080522


def call(result: int, what: str) -> None:
    """Raise OSError (with errno's words) when a libc call returned non-zero."""
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int = NAMESPACES) -> None:
    """unshare(2): the calling process's next children start in new namespaces (its own PID stays)."""
    call(libc.unshare(flags), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""
    call(libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                    data.encode() if data else None), f"mount {target}")


def loopback_up() -> None:
    """Bring up `lo`, the only interface of a new network namespace (it starts down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING))


def drop_capabilities() -> None:
    """Give up every capability for good: the bounding set (so no exec regains one), the ambient and the own."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL for a capability this kernel lacks: nothing to drop
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, for capabilities 0-31 and 32-63: none
    call(libc.capset(header, data), "capset")


def die_with_parent() -> None:
    """This process gets SIGKILL when its parent dies (PR_SET_PDEATHSIG)."""
    call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
