"""The class's people: the roster file, and one system user each (made, given a first password, removed).

A roster is a CSV file with one person a line, `username,full name,role` (role: student or instructor); a header
line `username,name,role` may come first:

    username,name,role
    alyssa,Alyssa P. Hacker,student
    ben,Ben Bitdiddle,student
    eva,Eva Lu Ator,instructor

Each person becomes a system user with a home folder of mode 0700 (no one else can read it) and a generated
password, which `make hub` prints once for the instructor to hand out (JupyterHub's PAM login checks it; a student
changes it with `passwd` in a JupyterLab terminal). A user that exists already keeps its account and password and
is never removed: only the accounts made here are.
"""

from __future__ import annotations

import csv
import grp
import os
import pwd
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from nbplumbing.processes import kill_until_gone

ROLES = ("student", "instructor")
# What useradd accepts on Debian without --badname, and what is safe in a URL path and a file name (nbgrader puts
# the student id into the exchange's file names, JupyterHub into /user/<name>/).
USERNAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
PASSWORD_BYTES = 9  # 12 URL-safe characters: 72 random bits, typed from a handout


class RosterError(ValueError):
    """The roster cannot be used as it is (the message names the line and what is wrong)."""


@dataclass(frozen=True)
class Person:
    username: str
    name: str
    role: str  # one of ROLES


def read_roster(path: Path) -> list[Person]:
    """The people of a roster file, in its order; RosterError on a malformed line, an unknown role or a repeat."""
    people: dict[str, Person] = {}
    with open(path, newline="") as file:
        for number, row in enumerate(csv.reader(file), start=1):
            cells = [cell.strip() for cell in row]
            if not any(cells) or (number == 1 and cells and cells[0].lower() == "username"):
                continue
            if len(cells) != 3:
                raise RosterError(f"{path}, line {number}: want username,full name,role; got {row}")
            username, name, role = cells
            if not USERNAME.fullmatch(username):
                raise RosterError(f"{path}, line {number}: {username!r} is not a username this hub can make "
                                  f"(lower-case letters, digits, '_' and '-', starting with a letter or '_')")
            if role not in ROLES:
                raise RosterError(f"{path}, line {number}: role {role!r} is none of {', '.join(ROLES)}")
            if username in people:
                raise RosterError(f"{path}, line {number}: {username} is on the roster twice")
            if ":" in name or "," in name:  # the GECOS field of /etc/passwd
                raise RosterError(f"{path}, line {number}: the full name may not hold ':' or ','")
            people[username] = Person(username, name, role)
    if not any(p.role == "student" for p in people.values()):
        raise RosterError(f"{path}: no student on the roster")
    return list(people.values())


def exists(username: str) -> bool:
    return username in {entry.pw_name for entry in pwd.getpwall()}


def group_exists(name: str) -> bool:
    return name in {entry.gr_name for entry in grp.getgrall()}


def _run(*argv: str, stdin: str | None = None) -> None:
    """Run a user-administration command; RuntimeError with its message when it fails."""
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} ... failed (exit {result.returncode}): {result.stderr.strip()}")


def make_group(name: str) -> bool:
    """Make a system group unless it exists; return whether it was made here."""
    if group_exists(name):
        return False
    _run("groupadd", "--system", name)
    return True


def make_user(username: str, name: str, home_base: Path, groups: list[str], password: bool = True,
              home: Path | None = None) -> str | None:
    """Make a system user (home folder 0700 under home_base, or at `home`) in `groups`; return its generated
    password (None with password=False: the account cannot log in with one)."""
    where = ["--home-dir", str(home)] if home else ["--base-dir", str(home_base)]
    _run("useradd", "--create-home", *where, "--shell", "/bin/bash", "--comment", name,
         "--groups", ",".join(groups), "-K", "HOME_MODE=0700", username)
    os.chmod(pwd.getpwnam(username).pw_dir, 0o700)  # HOME_MODE is ignored by older useradd
    if not password:
        return None
    secret = secrets.token_urlsafe(PASSWORD_BYTES)
    _run("chpasswd", stdin=f"{username}:{secret}\n")
    return secret


def user_processes(username: str) -> list[int]:
    """The processes that run as the user now (by uid, not by name)."""
    uid = pwd.getpwnam(username).pw_uid
    return [p.pid for p in psutil.process_iter(["uids", "status"])
            if p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE]


def remove_user(username: str) -> None:
    """End every process of the user, then remove the account and its home folder."""
    if not exists(username):
        return
    left = kill_until_gone(lambda: user_processes(username), wait=10.0)
    if user_processes(username):
        raise RuntimeError(f"{username}'s processes {left} did not end: the account is kept")
    _run("userdel", "--remove", username)


def remove_group(name: str) -> None:
    if group_exists(name):
        _run("groupdel", name)
