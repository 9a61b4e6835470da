"""Landlock (Linux 5.13+) through ctypes: confine this process and its future children to a set of folders.

    restrict(read=[...], write=[...])   # irreversible; every child inherits it

Landlock is unprivileged and stacks: once restrict() returns, a path outside `read` and `write` cannot be opened,
listed or executed, and one outside `write` cannot be created, changed, renamed or removed. A restricted process
also cannot mount, ptrace or (ABI 6+) signal a process outside its domain. The rights handled are all those the
running kernel's ABI knows (the kernel's uapi header, include/uapi/linux/landlock.h).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from pathlib import Path

# x86_64, arm64 and every other architecture share these numbers (added together in Linux 5.13).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_*: bit -> the ABI that introduced it.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_DIR_RIGHTS = sum(1 << b for b in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights that apply to a file itself
READ = EXECUTE | READ_FILE | READ_DIR

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    """Landlock is missing or refused a call."""


def abi_version() -> int:
    """The Landlock ABI the kernel offers (0: none, or disabled at boot)."""
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def handled_rights(abi: int) -> int:
    """Every file-system right that ABI `abi` knows."""
    rights = READ | WRITE_FILE | _ABI1_DIR_RIGHTS
    return rights | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0) | (IOCTL_DEV if abi >= 5 else 0)


def restrict(read: Iterable[Path], write: Iterable[Path], listed: Iterable[Path] = ()) -> int:
    """Allow reading (and executing) beneath `read`, everything beneath `write`, listing (names, not contents)
    beneath `listed`, nothing else; return the ABI.

    Paths that do not exist are skipped (a Python install without lib64/, say). Sets no_new_privs, which
    Landlock requires of a process without CAP_SYS_ADMIN and which keeps setuid programs from regaining rights.
    """
    abi = abi_version()
    if abi < 1:
        raise LandlockError("Landlock is not available in this kernel (Linux 5.13+ with lsm=landlock)")
    handled = handled_rights(abi)
    attr = _RulesetAttr(handled, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the struct grew with the ABI
    ruleset = _check(_libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
                     "landlock_create_ruleset")
    try:
        for rights, paths in ((handled & READ, read), (handled, write), (READ_DIR, listed)):
            for path in paths:
                _add_path(ruleset, Path(path), rights)
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _add_path(ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not path.is_dir():
            rights &= FILE_RIGHTS  # a directory right on a file is EINVAL
        rule = _PathBeneathAttr(rights, fd)
        _check(_libc.syscall(_ADD_RULE, ruleset, ctypes.c_uint32(_RULE_PATH_BENEATH), ctypes.byref(rule),
                             ctypes.c_uint32(0)), f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise LandlockError(errno, f"{what}: {os.strerror(errno)}")
    return int(result)
