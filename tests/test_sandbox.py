"""The grading sandbox (autograder/sandbox/): its parts on their own, and the hostile corpus in the grading run.

The parts: Landlock confines a process, a cgroup bounds memory and processes and ends every process in it, this
machine can make the sandbox (CI's can: it runs as root on Linux 6.x), and grading refuses without one unless told.
The grading run (tests/corpus/hostile.py, lab 00): what the hostile submissions managed, as they report it in
their own output, and what they left behind; their scores and feedback are checked with every case's in
tests/test_grading.py.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from autograder import class_run, grade, sandbox
from autograder.execution import MARKER, OUTPUT_CAP
from autograder.gradebook import CSV_NAME, read_rows
from autograder.reports import row_of, summary
from autograder.sandbox import jupyter_env, landlock, make_jupyter_folder
from autograder.sandbox.confine import confined
from autograder.sandbox.launch import LaunchServer
from nbplumbing.adapter import PipelineError, course_dir
from nbplumbing.cgroup import Group
from nbplumbing.processes import kill_until_gone
from tests.common import ROOT, GradingRun, autograded, notebook
from tests.corpus.common import HIDDEN, SOLUTION, solution_notebook
from tests.corpus.hostile import ASSIGNMENT, FLOOD_WORD, REPORT, SANDBOX_LIMITS, TOKEN

pytestmark = pytest.mark.lab00  # the hostile corpus is lab 00's: `-m lab00` grades it
CAN_SANDBOX = sys.platform == "linux" and os.geteuid() == 0
needs_sandbox = pytest.mark.skipif(not CAN_SANDBOX, reason="the sandbox needs Linux and root here")
DAEMON_DELAY_S = 15.0  # the hostile daemon writes this long after it started


# ---- the parts ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(landlock.abi_version() < sandbox.MIN_LANDLOCK_ABI, reason="no Landlock ABI 3 here")
def test_landlock_confines_a_process_and_its_children(tmp_path: Path) -> None:
    """Inside: its write folder is writable, a file beside it is not even readable, nor the repository."""
    (tmp_path / "w").mkdir()
    (tmp_path / "secret").write_text("answers")
    pid = os.fork()
    if pid == 0:  # the child confines itself, then a grandchild (a rank) tries
        try:
            landlock.restrict(read=sandbox.readable_runtime(), write=[tmp_path / "w"])
            (tmp_path / "w" / "ok").write_text("scratch")
            outcome = 0
            for forbidden in (tmp_path / "secret", ROOT / "README.md"):
                try:
                    forbidden.read_text()
                    outcome |= 1
                except PermissionError:
                    pass
            child = subprocess.run([sys.executable, "-c", f"open({str(tmp_path / 'secret')!r})"], capture_output=True)
            outcome |= 2 * (child.returncode == 0)
            os._exit(outcome)
        except BaseException:  # noqa: BLE001
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"outcome {os.waitstatus_to_exitcode(status)} (1: read outside, " \
        "2: a child read outside, 4: restrict failed)"
    assert (tmp_path / "w" / "ok").read_text() == "scratch"


def _gated(code: str) -> subprocess.Popen:
    """A Python process that runs `code` only once it reads a line: it can join a cgroup before it acts."""
    return subprocess.Popen([sys.executable, "-c", f"import sys; sys.stdin.readline()\n{code}"],
                            stdin=subprocess.PIPE, text=True)


@needs_sandbox
def test_cgroup_stops_a_process_past_its_memory_and_ends_every_process() -> None:
    group = Group.create(256 << 20, 64)
    try:
        hog = _gated("x = bytearray(1 << 30)")
        group.add(hog.pid)
        hog.communicate("go\n", timeout=60)
        assert hog.returncode == -signal.SIGKILL and group.oom_kills() == 1 and group.limit_reached() >= 1
        daemons = _gated("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\ntime.sleep(600)")
        group.add(daemons.pid)
        daemons.stdin.write("go\n")
        daemons.stdin.flush()
        deadline = time.monotonic() + 30
        while len(group.pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(group.pids()) == 2, group.pids()
        assert group.kill_all() == 2 and group.pids() == []
        daemons.wait(timeout=10)
    finally:
        group.remove()
    assert not any(f.exists() for f in group.folders)


def _has_cpu_share(group: Group) -> bool:
    """Whether the group has a CPU share of its own: v1's cpu hierarchy, or v2's cpu controller."""
    if group.version == 1:
        return len(group.folders) == 3
    return "cpu" in (group.folders[0] / "cgroup.controllers").read_text().split()


@needs_sandbox
def test_each_submission_gets_one_share_of_the_cpu() -> None:
    """One process spinning in one group, six in another, for the same 3 s: the lone one gets as much CPU as the six
    together (each group one share), whatever else the machine runs; without the groups it would get a seventh."""
    groups = [Group.create(1 << 30, 64), Group.create(1 << 30, 64)]
    try:
        if not _has_cpu_share(groups[0]):
            pytest.skip("no cpu controller in this machine's cgroups")
        spin = "import time\nend = time.time() + 3\nwhile time.time() < end:\n    pass\nprint(time.process_time())"
        procs = [(group, subprocess.Popen([sys.executable, "-c", f"import sys; sys.stdin.readline()\n{spin}"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
                 for group, count in zip(groups, (1, 6), strict=True) for _ in range(count)]
        for group, proc in procs:
            group.add(proc.pid)
        for _, proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        used = [0.0, 0.0]
        for group, proc in procs:
            used[groups.index(group)] += float(proc.communicate(timeout=60)[0])
    finally:
        for group in groups:
            group.remove()
    assert used[0] > 0.6 * used[1], f"CPU seconds: the lone process {used[0]:.2f}, the six {used[1]:.2f}"


@needs_sandbox
def test_a_submission_that_fills_its_scratch_folder_is_stopped(tmp_path: Path) -> None:
    """Past its scratch folder's bound every process of the submission is killed, and the report says why."""
    box = sandbox.Box.open(tmp_path, sandbox.Limits(1 << 30, 64, scratch_bytes=1 << 20))
    try:
        writer = _gated(f"open({str(box.scratch / 'tmp' / 'big')!r}, 'wb').write(b'x' * (4 << 20))\n"
                        "import time; time.sleep(60)")
        box.group.add(writer.pid)
        writer.stdin.write("go\n")
        writer.stdin.flush()
        writer.wait(timeout=10 * sandbox.SCRATCH_POLL_S + 10)
    finally:
        notes = box.close()
    assert writer.returncode == -signal.SIGKILL
    assert notes == [f"wrote more than 0.000976562 GB (or {sandbox.SCRATCH_FILES} files) into its scratch folder: "
                     "stopped (the disk space of its kernel and ranks together is bounded)"], notes


# A stand-in for the sandbox's launcher (the launch server's argv): it writes its pid, notes each SIGINT and exits 3 on
# SIGTERM; the server runs it as it runs the launcher.
FAKE_LAUNCHER = """
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
signal.signal(signal.SIGINT, lambda *_: out.open("a").write("INT\\n"))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
out.write_text(f"{os.getpid()}\\n")
while True:
    time.sleep(0.05)
"""


def _launch_server(tmp_path: Path, launches: int) -> LaunchServer:
    """A launch server in tmp_path, for the connection file tmp_path/k.json, that runs FAKE_LAUNCHER (its record in
    tmp_path/launched)."""
    server = LaunchServer(tmp_path / "launch", tmp_path / "k.json", tmp_path, dict(os.environ), launches)
    server.argv = [sys.executable, "-c", FAKE_LAUNCHER, str(tmp_path / "launched")]
    server.start()
    return server


def _client(tmp_path: Path, connection_file: Path, wrap: list[str]) -> subprocess.Popen:
    """The kernelspec's client, as nbgrader would start it (run by `wrap`: confined, or not)."""
    return subprocess.Popen([*wrap, sys.executable, "-m", "autograder.sandbox.launch", str(tmp_path / "launch"), "-f",
                             str(connection_file)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, start_new_session=True)


def _launched(tmp_path: Path, lines: int) -> list[str]:
    """FAKE_LAUNCHER's record once it has `lines` lines (within 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (record := tmp_path / "launched").exists() and len(said := record.read_text().split()) >= lines:
            return said
        time.sleep(0.05)
    raise AssertionError(f"the launcher did not write {lines} lines")


@needs_sandbox
def test_the_launch_server_passes_signals_on_and_ends_its_kernel_with_the_client(tmp_path: Path) -> None:
    """A confined client's SIGINT and SIGTERM reach what the server launched, and the client exits with its status
    (3); a client killed (jupyter_client's kill, nbgrader stopped) takes it along; past `launches`, nothing."""
    server, pids = _launch_server(tmp_path, launches=2), []
    try:
        client = _client(tmp_path, tmp_path / "k.json", confined([], []))
        pids.append(int(_launched(tmp_path, 1)[0]))
        client.send_signal(signal.SIGINT)
        assert _launched(tmp_path, 2)[1] == "INT"
        client.send_signal(signal.SIGTERM)
        said = client.communicate(timeout=30)[1]
        assert client.returncode == 3, said
        (tmp_path / "launched").unlink()
        client = _client(tmp_path, tmp_path / "k.json", confined([], []))
        pids.append(int(_launched(tmp_path, 1)[0]))
        client.kill()
        client.communicate(timeout=30)
        deadline = time.monotonic() + 30
        while psutil.pid_exists(pids[-1]) and psutil.Process(pids[-1]).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the launched process outlived its client"
            time.sleep(0.05)
        third = _client(tmp_path, tmp_path / "k.json", confined([], []))
        assert "no launch server" in third.communicate(timeout=30)[1] and third.returncode == 1
    finally:
        refusals = server.stop()
        kill_until_gone(lambda: [pid for pid in pids if psutil.pid_exists(pid)], 5)  # what a failure left
    assert refusals == []


@needs_sandbox
@pytest.mark.parametrize("how", ["unconfined", "another connection file", "in a kernel's PID namespace"])
def test_the_launch_server_starts_nothing_for_a_request_it_does_not_expect(tmp_path: Path, how: str) -> None:
    """Root's rights start a kernel only for a confined nbgrader's client, in the grader's PID namespace (not a kernel,
    whose namespace is its own), on the connection file the grader chose; the first refusal ends the server."""
    server = _launch_server(tmp_path, launches=1)
    try:
        wrap = {"unconfined": [], "another connection file": confined([], []),
                # the client as the first process of a new PID namespace, as a kernel is
                "in a kernel's PID namespace": ["unshare", "--pid", "--fork", *confined([], [])]}[how]
        client = _client(tmp_path, tmp_path / ("other.json" if how == "another connection file" else "k.json"), wrap)
        said = client.communicate(timeout=30)[1]
        assert client.returncode == 1, said
    finally:
        refusals = server.stop()
    assert not (tmp_path / "launched").exists()
    why = {"unconfined": "not confined", "another connection file": "not the one this grading chose",
           "in a kernel's PID namespace": "another PID namespace"}[how]
    assert len(refusals) == 1 and why in refusals[0] and why in said, (refusals, said)


# A grader that starts a sandboxed kernel through its launch server, as grade_one does, says where its cgroup and
# folders are, and waits to be killed.
GRADER_OF_ONE_KERNEL = """
import json, subprocess, sys, time
from pathlib import Path
from autograder.sandbox import Box, Limits
from autograder.sandbox.confine import confined
from nbplumbing.adapter import nbgrader_env
root = Path(sys.argv[1])
box = Box.open(root, Limits(1 << 30, 64))
box.serve(nbgrader_env(box.env(), "a-kernel-dies-with-its-grader"), root, 1)
subprocess.Popen([*confined([], []), sys.executable, "-m", "autograder.sandbox.launch", str(box.launch), "-f",
                  str(box.connection_file)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
print(json.dumps([box.group.version, [str(f) for f in box.group.folders], str(box.sockets), str(box.launch.parent)]),
      flush=True)
time.sleep(600)
"""


@needs_sandbox
def test_a_kernel_dies_with_its_grader(tmp_path: Path) -> None:
    """The launch server is a thread of the grader: were the grader killed, the kernel it launched (and so its
    namespace) goes too, since the launcher dies with it; nothing else would end an idle kernel."""
    grader = subprocess.Popen([sys.executable, "-c", GRADER_OF_ONE_KERNEL, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    version, folders, *made = json.loads(grader.stdout.readline())
    group = Group([Path(f) for f in folders], version)
    try:
        deadline = time.monotonic() + 60
        while len(group.pids()) < 3:  # the launcher, the namespace's init and the kernel
            assert time.monotonic() < deadline and grader.poll() is None, "the kernel did not start"
            time.sleep(0.1)
        grader.kill()
        grader.communicate(timeout=30)
        deadline = time.monotonic() + 15
        while group.pids():
            assert time.monotonic() < deadline, f"the kernel outlived its grader: {group.pids()}"
            time.sleep(0.1)
    finally:
        grader.kill()
        group.remove()
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


@needs_sandbox
def test_a_client_that_says_nothing_does_not_hold_the_launch_server(tmp_path: Path) -> None:
    """The grader stops the server (Box.close) whatever a client does: one that connects and sends nothing too."""
    server = _launch_server(tmp_path, launches=1)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as silent:
        silent.connect(str(tmp_path / "launch"))
        stopping = threading.Thread(target=server.stop, daemon=True)
        stopping.start()
        stopping.join(timeout=10)
        assert not stopping.is_alive(), "the server waits for the silent client's request"
    assert not (tmp_path / "launched").exists()


@needs_sandbox
def test_this_machine_can_sandbox_the_grading() -> None:
    """CI's machine (root, Linux 6.x) must grade sandboxed: `make test` grades the corpus that way."""
    assert sandbox.missing() == []


def test_grading_refuses_without_a_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox, "missing", lambda: ["Landlock ABI 3+ (here: none)"])
    with pytest.raises(PipelineError) as error:
        class_run.grade_class(tmp_path, tmp_path / "out", progress=lambda line: None)
    words = str(error.value)
    assert "cannot sandbox the grading here" in words and "Landlock ABI 3+ (here: none)" in words
    assert "--no-sandbox" in words and "not sandboxed" in words


def test_unsandboxed_results_say_so(tmp_path: Path) -> None:
    """--no-sandbox: each result notes it, and so grades.csv's notes and the summary."""
    notes = sandbox.Box.open(tmp_path, None).close()
    assert notes == [sandbox.NOT_SANDBOXED] and not (tmp_path / ".sb").exists()
    r = grade.Result(student="s", assignment="a", status=grade.GRADED, score=1.0, max_score=1.0, notes=notes)
    assert row_of(r)["notes"] == "not sandboxed"
    assert summary([r]).endswith("; not sandboxed")
    assert "not sandboxed" not in summary([grade.Result(student="s", assignment="a", status=grade.GRADED)])


# ---- the hostile corpus in the grading run ------------------------------------------------------------------


def outputs(grading: GradingRun, student: str) -> str:
    """Everything a submission's cells printed or raised, in its autograded notebook."""
    texts = []
    for nb in autograded(grading, ASSIGNMENT, student):
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                texts += ["".join(out.get("text", "")), str(out.get("evalue", "")), json.dumps(out.get("data", {}))]
    assert texts, f"{student}: no autograded notebook, or no output at all"
    return "\n".join(texts)


def reports(grading: GradingRun) -> list[str]:
    return [line[len(REPORT):] for line in outputs(grading, "hostile").splitlines() if line.startswith(REPORT)]


def answers(grading: GradingRun, student: str) -> list[str]:
    """Lines of lab 00's solutions and hidden tests that are neither in the student release nor in the
    submission itself (a solved exercise's feedback shows the student's own solution)."""
    solution = json.loads(solution_notebook(ASSIGNMENT).read_text())
    source = "\n".join("".join(c["source"]) for c in solution["cells"])
    submitted = grading.cases[(ASSIGNMENT, student)].make(solution)
    own = "\n".join("".join(c["source"]) for c in submitted["cells"])
    # Every lab's release: a later lab may hand out an earlier lab's answer, which is then no secret.
    release = "\n".join(p.read_text() for p in sorted((ROOT / "course").glob("*/*.ipynb")))
    regions = [m[0] for pattern in (SOLUTION, HIDDEN) for m in pattern.finditer(source)]
    lines = {line.strip() for region in regions for line in region.splitlines()}
    found = [line for line in lines if len(line) >= 25 and "###" not in line and line not in own
             and json.dumps(line)[1:-1] not in release]
    assert len(found) > 20, found
    return found


def returned(grading: GradingRun, student: str) -> str:
    """Everything a submission gets back: its feedback pages and report (as text), its row of grades.csv."""
    pages = sorted((course_dir(grading.out, "feedback") / student / ASSIGNMENT).glob("*.html"))
    [row] = [r for r in read_rows(grading.out / CSV_NAME) if r["student"] == student and r["assignment"] == ASSIGNMENT]
    return "\n".join([*(html.unescape(re.sub(r"<[^>]+>", "", p.read_text())) for p in pages),
                      *row["notes"].split("; "), *row["flagged"].split("; ")])


@pytest.mark.parametrize("student", ["hostile", "memory_hog", "transformer", "swallower", "shown_result", "tracer",
                                     "reached_shell"])
def test_no_answer_reaches_a_hostile_submission(grading: GradingRun, student: str) -> None:
    """No line of the solutions or hidden tests in its feedback pages, its report or its row of grades.csv; nor,
    for the submissions that read files, in what its cells printed (the swallower's hooks print the hidden tests
    into the instructor's copy: test_kernel_attacks_were_tried checks that they did, so the scrub has work)."""
    texts = [(returned(grading, student), "its feedback")]
    if student in ("hostile", "memory_hog"):
        texts.append((outputs(grading, student), "its output"))
    for text, where in texts:
        leaked = [line for line in answers(grading, student) if line in text]
        assert not leaked, f"{student}: {len(leaked)} lines of the answers in {where}, e.g. {leaked[:3]}"


STOPPED = "it stopped before its end, and the kernel said it had not failed"
CHANGED = "what ran was not the cell as written, or the kernel's input handling had been changed"


@pytest.mark.parametrize("student, why", [
    ("transformer", {"test_ping_pong": STOPPED, "test_fit_alpha_beta": STOPPED, "test_ring_shift": CHANGED,
                     "test_size_for_share": STOPPED}),
    ("swallower", {"test_ping_pong": STOPPED, "test_fit_alpha_beta": STOPPED, "test_ring_shift": STOPPED,
                   "test_size_for_share": STOPPED}),
])
def test_a_test_that_did_not_run_as_written_is_flagged_with_the_reason(grading: GradingRun, student: str,
                                                                        why: dict[str, str]) -> None:
    """Each test cell of the transformer (turned into `pass`, or cut to its last line) and of the swallower (its
    failures swallowed) gave no evidence of running to its end: flagged with the reason (their 0 of 11 is checked
    with every case's score in tests/test_grading.py); and the constructs that did it are flagged by line."""
    r = grading.results[(ASSIGNMENT, student)]
    pattern = re.compile(r"(\S+) did not run to its end as written \((.+)\)")
    found = {m[1]: m[2] for f in r.flagged if (m := pattern.fullmatch(f))}
    assert found == why, r.flagged
    statics = "\n".join(f for f in r.flagged if "did not run" not in f)
    assert "(uses get_ipython)" in statics, statics
    if student == "swallower":
        for words in ("(uses .set_custom_exc)", "(imports linecache)", "(uses In)", "(uses ._getframe)",
                      "(replaces an attribute of the module _sys)"):
            assert words in statics, f"not flagged: {words}\n{statics}"


def test_kernel_attacks_were_tried(grading: GradingRun) -> None:
    """What the swallower's cells printed into the instructor's copy: its hook echoed the test cells (hidden tests
    included: the feedback's scrub had work), its handler swallowed the tests' failures, size_for_share's error text
    was its caller's source; IPython's history holds no test cell (they run outside it), the notebook being run was
    not readable, and the flood was cut at the cap."""
    printed = outputs(grading, "swallower")
    assert f"{REPORT}raw cell:" in printed and f"{REPORT}swallowed" in printed
    assert [line for line in answers(grading, "swallower") if line in printed], "the hooks printed no hidden test"
    history = printed.split(f"{REPORT}history: ", 1)[1].split(FLOOD_WORD, 1)[0]
    assert "_ip.set_custom_exc" in history and MARKER not in history, history[-2000:]
    assert f"{REPORT}notebook:" not in printed.replace(f'"{REPORT}notebook:"', "")
    [nb] = autograded(grading, ASSIGNMENT, "swallower")
    last = nb["cells"][-1]
    text = "".join("".join(o.get("text", "")) for o in last["outputs"])
    assert FLOOD_WORD * 100 in text and "[output cut: more than" in text, text[-300:]
    assert sum(len(json.dumps(o)) for o in last["outputs"]) < 2 * OUTPUT_CAP
    page = course_dir(grading.out, "feedback") / "swallower" / ASSIGNMENT / "ranks_and_alpha_beta.html"
    assert page.is_file(), "no feedback page for the Markdown output that names a missing attachment"


def test_hostile_code_reads_and_writes_nothing_and_reaches_no_network(grading: GradingRun) -> None:
    """By its own account: it read only its own notebook folder, wrote nothing (no folder, no gradebook), and its
    connection to 192.0.2.1 failed at once (ENETUNREACH: the namespace has only loopback)."""
    report = json.loads(next(r for r in reports(grading) if r.startswith("{")))
    own = f"/autograded/hostile/{ASSIGNMENT}/"
    assert all(own in path for path in report["found"]), f"read outside its folder: {report['found']}"
    assert report["wrote"] == [], f"wrote into {report['wrote']}"
    assert report["net"] == "OSError errno 101" and report["net_seconds"] < 1.0, report


def test_fork_bomb_stops_at_the_process_bound_and_an_overrun_in_the_kernel_fails_in_its_cell(
        grading: GradingRun) -> None:
    """The fork bomb (the last cell) got fewer forks than the process bound; before it, the kernel's allocation of
    more than the memory bound failed in its own cell, and the kernel lived on to run the bomb."""
    [bomb] = [r for r in reports(grading) if r.startswith("fork bomb")]
    forks = int(re.match(r"fork bomb: (\d+) forks, then BlockingIOError", bomb)[1])
    assert 0 < forks < SANDBOX_LIMITS.processes, bomb
    assert "can't allocate memory" in outputs(grading, "hostile")


def test_nothing_hostile_outlives_its_grading_or_changes_anything(grading: GradingRun) -> None:
    """DAEMON_DELAY_S after the hostile submission was graded (its daemon's time to write), no file it meant to
    write exists, in the repository, the grading run's folders or the temporary folder, and no process of it runs."""
    [nb] = sorted((course_dir(grading.out, "autograded") / "hostile" / ASSIGNMENT).glob("*.ipynb"))
    time.sleep(max(0.0, nb.stat().st_mtime + DAEMON_DELAY_S + 1 - time.time()))
    places = [p for p in ROOT.iterdir() if p.name not in (".venv", ".git")] + [grading.out.parent]
    written = [p for place in places for p in ([place] if place.is_file() else place.rglob(f"{TOKEN}*"))
               if p.name.startswith(TOKEN)]
    written += [p for p in [ROOT, *Path(tempfile.gettempdir()).iterdir()] if p.name.startswith(TOKEN)]
    assert not written, f"the hostile submission wrote {written}"
    alive = []
    for proc in psutil.process_iter(["cmdline"]):
        if TOKEN in " ".join(proc.info["cmdline"] or []):
            alive.append(proc.pid)
    assert not alive, f"its daemon still runs: {alive}"


def test_markers_written_as_text_still_get_feedback(grading: GradingRun) -> None:
    """The hostile cell holds nbgrader's hidden-test marker as text: the feedback page is made all the same."""
    page = course_dir(grading.out, "feedback") / "hostile" / ASSIGNMENT / solution_notebook(ASSIGNMENT).with_suffix(
        ".html").name
    assert page.is_file(), f"no feedback page {page.name}: {sorted(p.name for p in page.parent.iterdir())}"


def test_deadlock_everywhere_is_graded_in_bounded_time(grading: GradingRun) -> None:
    """Every launch of the hostile submission deadlocks; once they have hung for HANG_BUDGET_S the rest fail at once:
    well within the issue's 3 minutes, with its 4 points of exercises 0.2 and 0.4 kept (test_grading checks them)."""
    r = grading.results[(ASSIGNMENT, "hostile")]
    assert r.seconds < 180, f"took {r.seconds:.0f} s"
    assert "already hung" in "\n".join(r.notes)


def test_a_test_cell_shows_nothing_and_leaves_no_source_behind(grading: GradingRun) -> None:
    """shown_result's test cells: no execute_result or display kept (nbgrader would read one as a score; its 0 of 11
    is checked with every case's score), the display it updated to 5 MB cut at the cap; and the test cells that ran
    before its last cell had left IPython's source cache when that cell read it through tracemalloc's linecache."""
    [nb] = autograded(grading, ASSIGNMENT, "shown_result")
    tests = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    shown = [(c["metadata"]["nbgrader"]["grade_id"], o["output_type"]) for c in tests for o in c["outputs"]
             if o["output_type"] not in ("error", "stream")]
    assert not shown, f"a test cell kept a result or a display: {shown}"
    assert sum(len(json.dumps(o)) for o in nb["cells"][-1]["outputs"]) < 2 * OUTPUT_CAP
    [line] = [line for line in outputs(grading, "shown_result").splitlines() if line.startswith(f"{REPORT}linecache:")]
    read = base64.b64decode(line.rpartition(":")[2].strip()).decode()
    assert MARKER not in read and not [a for a in answers(grading, "shown_result") if a in read], read[:2000]


# ---- what reads a submission after its kernel ------------------------------------------------------------------

# A submission's cell, as a student who read the grader would write it: a template, a kernelspec and a Jupyter config
# in every Jupyter folder it can name from inside the kernel, each touching MARKER (outside the sandbox) and marking
# the page when anything reads it. It prints how many it could write: the scratch folder's ones at least.
PLANTING_CELL = '''
import json
import os
from pathlib import Path
MARKER = {marker!r}
ACT = f"__import__('pathlib').Path({{MARKER!r}}).touch()"
# The page's marker is not whole in the source (the page shows the source)
JINJA = "{{{{ lipsum.__globals__['os'].system('touch " + MARKER + "') }}}}" + "PLANTED" + "-TEMPLATE"
KERNEL = json.dumps({{"argv": ["touch", MARKER], "language": "python"}})
home = Path(os.environ["HOME"])
data = [home.parent / "jupyter", home / ".local" / "share" / "jupyter", Path(os.environ.get("JUPYTER_PATH", home))]
config = [home / ".jupyter", home.parent / "jupyter", Path(os.environ.get("JUPYTER_CONFIG_DIR", home))]
planted = 0
for folder, name, text in [
        *((d / "nbconvert" / "templates" / t, f, JINJA) for d in data for t in ("classic", "feedback", "lab")
          for f in ("index.html.j2", "base.html.j2", "feedback.html.j2")),
        *((d / "kernels" / k, "kernel.json", KERNEL) for d in data for k in ("ddp-course-sandbox", "python3")),
        *((c, f, ACT) for c in config for f in ("nbgrader_config.py", "jupyter_config.py",
                                                "jupyter_nbconvert_config.py"))]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
        planted += 1
    except OSError:
        pass
print("planted", planted)
'''


# A config file in the course root, which every nbgrader process run there executes (nbgrader loads the
# nbgrader_config.py of its working folder): it prints, after a nonce that no kernel can read, what that process
# holds, and whether it could read a file of the repository's tests/ and write a folder outside the course root.
PROBE_CONFIG = '''
import json, os, sys
from pathlib import Path
status = dict(line.rstrip("\\n").split(":\\t", 1) for line in open("/proc/self/status") if ":\\t" in line)
tried = {{}}
for what, act in (("read", lambda: Path({secret!r}).read_text()),
                  ("write", lambda: Path({outside!r}, str(os.getpid())).write_text("x"))):
    try:
        act()
        tried[what] = "done"
    except OSError:
        tried[what] = "denied"
held = {{name: status[name] for name in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs")}}
print({nonce!r}, json.dumps({{"command": sys.argv[1], **held, **tried}}), flush=True)
'''


@dataclass
class Planted:
    """The grading of a submission that plants files wherever its kernel can (PLANTING_CELL), with PROBE_CONFIG in
    its course root."""

    result: grade.Result
    marker: Path  # touched by anything planted that runs
    outside: Path  # a folder the probe tries to write
    runs: list[tuple[str, list[str], bool]]  # each nbgrader run: (command, wrap, whether the scratch folder was there)
    probes: list[dict]  # what PROBE_CONFIG printed, a line per nbgrader process (and per config load)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    tmp_path = tmp_path_factory.mktemp("planted")
    marker, outside, nonce = tmp_path / "read-outside", tmp_path / "outside", f"probe-{os.urandom(8).hex()}"
    outside.mkdir()
    subs = tmp_path / "subs" / "alice" / ASSIGNMENT
    subs.mkdir(parents=True)
    [release] = (ROOT / "course" / ASSIGNMENT).glob("*.ipynb")
    nb = json.loads(release.read_text())
    nb["cells"].insert(2, {"cell_type": "code", "execution_count": None, "id": "planting", "metadata": {},
                           "outputs": [], "source": PLANTING_CELL.format(marker=str(marker))})
    (subs / release.name).write_text(json.dumps(nb))
    runs: list[tuple[str, list[str], bool]] = []
    real = grade.run_nbgrader

    def watched(command: str, *args: str, root: Path, **kwargs: object) -> object:
        runs.append((command, list(kwargs.get("wrap", ())), (Path(root) / ".sb").exists()))
        (Path(root) / "nbgrader_config.py").write_text(PROBE_CONFIG.format(
            secret=str(ROOT / "tests" / "conftest.py"), outside=str(outside), nonce=nonce))
        return real(command, *args, root=root, **kwargs)

    template = grade.prepare_template([ASSIGNMENT], tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grade, "run_nbgrader", watched)
        [entry] = class_run.collect(tmp_path / "subs", tmp_path)
        r = grade.grade_one(entry, template, tmp_path, timeout=600, env={"COURSE_FAST": "1"})
    probes = [json.loads(line.split(" ", 1)[1]) for line in (r.root / "nbgrader.log").read_text().splitlines()
              if line.startswith(nonce + " ")]
    return Planted(r, marker, outside, runs, probes)


@needs_sandbox
@pytest.mark.slow
def test_nothing_the_kernel_writes_is_read_outside_its_sandbox(planted: Planted) -> None:
    """A submission plants templates, kernelspecs and Jupyter configs in its scratch folder (and wherever else its
    kernel can name): none is read, the feedback page is nbgrader's own, and every nbgrader run runs confined, the
    feedback's once the sandbox is closed and its scratch removed."""
    r = planted.result
    assert r.status == grade.GRADED and r.score == 0, (r.status, r.score, r.notes)
    [release] = (ROOT / "course" / ASSIGNMENT).glob("*.ipynb")
    folder = r.root / "autograded" / "alice" / ASSIGNMENT
    [planting] = [c for c in notebook(folder / release.name)["cells"] if c.get("id") == "planting"]
    said = "".join("".join(o.get("text", "")) for o in planting["outputs"])
    planted_files = re.search(r"planted (\d+)", said)
    assert planted_files and int(planted_files[1]) >= 2 * 9 + 2 * 2 + 2 * 3, said  # the scratch folder's, at least
    assert not planted.marker.exists(), "a planted file was read and run outside the sandbox"
    [page] = (r.root / "feedback" / "alice" / ASSIGNMENT).glob("*.html")
    assert "PLANTED-TEMPLATE" not in page.read_text() and "test_ping_pong" in page.read_text()
    assert [(command, bool(wrap), scratch) for command, wrap, scratch in planted.runs] == [
        ("autograde", True, True), ("generate_feedback", True, False)], planted.runs
    assert all(wrap[:3] == confined([], [])[:3] for _, wrap, _ in planted.runs)  # the confining launcher


@needs_sandbox
@pytest.mark.slow
def test_every_nbgrader_that_reads_a_submission_runs_confined(planted: Planted) -> None:
    """nbgrader autograde (the submitted notebook, the kernel's messages) and generate_feedback (the autograded
    notebook), as each process itself sees it (PROBE_CONFIG): no capability (uid 0 without any is an ordinary user),
    no_new_privs, and Landlock: the repository's tests/ unreadable, a folder outside the course root unwritable.
    Only the grader's launch server, which starts the kernel, holds root's rights (autograder/sandbox/launch.py)."""
    assert planted.result.status == grade.GRADED, planted.result.notes
    assert {p["command"] for p in planted.probes} == {"autograde", "generate_feedback"}, planted.probes
    none = "0" * 16
    held = [p for p in planted.probes if (p["CapEff"], p["CapPrm"], p["CapBnd"], p["NoNewPrivs"], p["read"],
                                          p["write"]) != (none, none, none, "1", "denied", "denied")]
    assert not held, f"an nbgrader process that reads a submission is not confined: {held}"
    assert not list(planted.outside.iterdir())


@pytest.mark.skipif(landlock.abi_version() < sandbox.MIN_LANDLOCK_ABI, reason="no Landlock ABI 3 here")
def test_a_confined_jupyter_application_starts_in_nbgraders_jupyter_folder(tmp_path: Path) -> None:
    """A Jupyter application (generate_feedback is one) starts confined as the feedback run is, in the folder that
    make_jupyter_folder makes, with a HOME that holds ~/.ipython: it migrates nothing (without the folder's marker,
    jupyter_core tried to write it there and stopped with a PermissionError, folder or no folder)."""
    (tmp_path / "home" / ".ipython" / "profile_default").mkdir(parents=True)
    root = tmp_path / "root"
    (root / "feedback").mkdir(parents=True)
    env = {**os.environ, "HOME": str(tmp_path / "home"), **jupyter_env(make_jupyter_folder(root / ".jupyter"))}
    env.pop("IPYTHONDIR", None)
    code = "from jupyter_core.application import JupyterApp; JupyterApp().initialize([]); print('started')"
    run = subprocess.run([*confined([root], [root / "feedback"]), sys.executable, "-c", code], env=env, cwd=root,
                         capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout.strip()) == (0, "started"), run.stderr[-2000:]
    assert sorted(p.name for p in (root / ".jupyter" / "config").iterdir()) == ["migrated"]


def test_a_confined_process_has_no_capability_and_reaches_only_its_folders(tmp_path: Path) -> None:
    """What generate_feedback runs under (autograder/sandbox/confine.py): no capability (root's none either), its
    `read` folder and the installed environment readable, only its `write` folder writable, nothing else."""
    (tmp_path / "r").write_text("notebook")
    (tmp_path / "w").mkdir()
    (tmp_path / "secret").write_text("answers")
    code = f"""
from pathlib import Path
tried = {{}}
for path in ({str(tmp_path / 'secret')!r}, {str(ROOT / 'solutions')!r}, {str(ROOT / 'tests' / 'conftest.py')!r}):
    try:
        Path(path).read_text()
        tried[path] = "read"
    except (PermissionError, IsADirectoryError):
        tried[path] = "denied"
for path in ({str(tmp_path / 'out')!r}, {str(ROOT / 'autograder' / 'planted.py')!r}):
    try:
        Path(path).write_text("x")
        tried[path] = "written"
    except PermissionError:
        tried[path] = "denied"
Path({str(tmp_path / 'w' / 'ok')!r}).write_text(Path({str(tmp_path / 'r')!r}).read_text())
caps = [line.split()[1] for line in open("/proc/self/status") if line.startswith(("CapEff", "CapPrm", "CapBnd"))]
print(sorted(set(tried.values())), caps)
"""
    run = subprocess.run([*confined([tmp_path / "r"], [tmp_path / "w"]), sys.executable, "-c", code],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == "['denied'] ['0000000000000000', '0000000000000000', '0000000000000000']"
    assert (tmp_path / "w" / "ok").read_text() == "notebook"


def test_nbgraders_jupyter_paths_hold_nothing_a_kernel_can_write(tmp_path: Path) -> None:
    """Every Jupyter path nbgrader and nbconvert search (data and config), with a box's environment: the box's own
    folder (beside the scratch) and installed places only, never the scratch folder or the grader's home."""
    box = sandbox.Box.open(tmp_path, None)
    try:
        code = ("import json; from jupyter_core.paths import jupyter_path, jupyter_config_path\n"
                "print(json.dumps(jupyter_path() + jupyter_config_path()))")
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        run = subprocess.run([sys.executable, "-c", code], env={**env, **box.env()}, capture_output=True, text=True,
                             check=True, timeout=60)
        paths = [Path(p) for p in json.loads(run.stdout)]
    finally:
        box.close()
    installed = (box.jupyter, Path(sys.prefix), Path(sys.base_prefix), Path("/usr"), Path("/etc"))
    assert paths and all(any(p.is_relative_to(place) for place in installed) for p in paths), paths
    assert not any(p.is_relative_to(box.scratch) for p in paths), paths
