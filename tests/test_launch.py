"""The launcher's contract: results in rank order, failures and hangs explained, nothing left running."""

import gc
import io
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.distributed as dist
from nbclient import NotebookClient

import utils.launch as launch_module
from utils.launch import LaunchError, RankFailedError, RankHangError, launch, rank_device
from utils.launch_report import SECOND_WAIT
from utils.rank_files import DataUnpickler

# A hang is reported after `timeout`, plus a few seconds to collect the stacks: bound that, loosely.
REPORT_SLACK_S = 10.0


def _rank_and_args(offset: float, *, scale: float) -> dict:
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "value": scale * (dist.get_rank() + offset)}


def _sum_of_ranks() -> torch.Tensor:
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return t


def _record_pid(folder: Path) -> None:
    (folder / f"rank{dist.get_rank()}.pid").write_text(str(os.getpid()))


def _read_pids(folder: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(folder.glob("rank*.pid"))]


def _assert_all_gone(pids: list[int], within_s: float = 5.0) -> None:
    """Each pid must be gone (or a zombie nobody will wait for is impossible: launch joins its children)."""
    end = time.monotonic() + within_s
    alive = pids
    while alive and time.monotonic() < end:
        alive = [pid for pid in alive if _exists(pid)]
        time.sleep(0.1)
    assert not alive, f"processes left behind: {alive}"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


def test_results_come_back_in_rank_order_with_args_and_kwargs() -> None:
    results = launch(_rank_and_args, 3, 0.5, scale=2.0)
    assert results == [{"rank": r, "world": 3, "value": 2.0 * (r + 0.5)} for r in range(3)]


def test_collective_result_on_every_rank_and_single_rank_world() -> None:
    assert [t.item() for t in launch(_sum_of_ranks, 4)] == [6.0] * 4
    assert [t.item() for t in launch(_sum_of_ranks, 1)] == [0.0]


def test_prints_are_relayed_with_rank_prefix_and_stderr_stays_silent(capfd: pytest.CaptureFixture) -> None:
    def chatty() -> None:
        print(f"hello from {dist.get_rank()}")
        print("a warning nobody asked for", file=sys.stderr)

    launch(chatty, 2)
    out, err = capfd.readouterr()
    assert "[rank 0] hello from 0" in out and "[rank 1] hello from 1" in out
    assert err == ""


def test_one_intra_op_thread_per_rank_by_default() -> None:
    assert launch(torch.get_num_threads, 2) == [1, 1]
    assert launch(torch.get_num_threads, 2, threads=2) == [2, 2]


def test_rank_device_is_the_cpu_under_gloo() -> None:
    assert launch(rank_device, 2, backend="gloo") == [torch.device("cpu")] * 2


def test_a_raising_rank_is_reported_with_its_traceback(tmp_path: Path) -> None:
    def fails_on_rank_one(folder: Path) -> None:
        _record_pid(folder)
        if dist.get_rank() == 1:
            raise ValueError("rank one is unhappy")
        dist.barrier()

    with pytest.raises(RankFailedError) as info:
        launch(fails_on_rank_one, 3, tmp_path, timeout=30)
    message = str(info.value)
    assert info.value.ranks[0] == 1
    assert message.startswith("rank 1 failed")
    assert "ValueError: rank one is unhappy" in message
    assert 'raise ValueError("rank one is unhappy")' in message  # the line itself, from the traceback
    assert "_rank_main" not in message  # the launcher's own frames are trimmed
    _assert_all_gone(_read_pids(tmp_path))


def test_ranks_that_all_fail_before_the_supervisor_looks_are_still_reported(monkeypatch) -> None:
    """Every rank may end between two checks of the supervisor: the failure is still the rank's traceback."""
    def all_raise() -> None:
        raise ValueError("every rank is unhappy")

    def alive_after_all_ended(ranks: launch_module.Ranks) -> list[int]:
        for process in ranks.processes:  # the race, made certain: nothing is seen alive, every rank has ended
            process.join()
        return []

    monkeypatch.setattr(launch_module.Ranks, "alive", alive_after_all_ended)
    with pytest.raises(RankFailedError, match="ValueError: every rank is unhappy"):
        launch(all_raise, 2, timeout=30)


def test_exit_code_of_a_rank_that_exits(tmp_path: Path) -> None:
    def exits() -> None:
        if dist.get_rank() == 0:
            sys.exit(3)

    with pytest.raises(RankFailedError, match="rank 0: exited with code 3"):
        launch(exits, 2, timeout=30)


def test_deadlock_is_reported_with_both_blocking_lines_within_the_timeout(tmp_path: Path) -> None:
    def both_receive_first(folder: Path) -> None:
        _record_pid(folder)
        buf = torch.zeros(1)
        if dist.get_rank() == 0:
            dist.recv(buf, src=1)  # rank 0 waits for rank 1
        else:
            dist.recv(buf, src=0)  # rank 1 waits for rank 0
        dist.send(buf, dst=1 - dist.get_rank())

    timeout = 3.0
    start = time.monotonic()
    with pytest.raises(RankHangError) as info:
        launch(both_receive_first, 2, tmp_path, timeout=timeout)
    elapsed = time.monotonic() - start
    assert timeout <= elapsed < timeout + REPORT_SLACK_S
    blocked = info.value.blocked
    assert set(blocked) == {0, 1}
    assert "torch.distributed.recv" in blocked[0] and "dist.recv(buf, src=1)" in blocked[0]
    assert "torch.distributed.recv" in blocked[1] and "dist.recv(buf, src=0)" in blocked[1]
    assert "deadlock" in str(info.value)
    assert SECOND_WAIT not in str(info.value)  # blocked in recv, not in wait(): no word of a second wait
    _assert_all_gone(_read_pids(tmp_path))


def test_a_second_wait_on_one_request_hangs_on_gloo_and_the_report_says_why_it_may() -> None:
    def waits_twice() -> None:
        peer, message = 1 - dist.get_rank(), torch.zeros(1)
        request = dist.isend(message, peer) if dist.get_rank() == 0 else dist.irecv(message, peer)
        request.wait()
        request.wait()  # the message has arrived, yet on Gloo this never returns

    with pytest.raises(RankHangError) as info:
        launch(waits_twice, 2, timeout=5)
    assert set(info.value.blocked) == {0, 1}
    assert all("request.wait()" in where for where in info.value.blocked.values())
    assert str(info.value).endswith(SECOND_WAIT)


def test_a_rank_killed_mid_collective_ends_the_launch_naming_it(tmp_path: Path) -> None:
    def killed_during_all_reduce(folder: Path) -> None:
        _record_pid(folder)
        data = torch.ones(1 << 20)
        dist.barrier()
        if dist.get_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(data)

    start = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        launch(killed_during_all_reduce, 3, tmp_path, timeout=60)
    assert time.monotonic() - start < 30, "a dead peer must not cost the whole timeout"
    assert info.value.ranks[0] == 1
    assert str(info.value).startswith("rank 1 failed")
    assert "rank 1: killed by SIGKILL" in str(info.value)
    _assert_all_gone(_read_pids(tmp_path))


def test_ranks_die_with_a_killed_launcher(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        import torch.distributed as dist
        from utils.launch import launch

        def wait_forever():
            Path({str(tmp_path)!r}, f"rank{{dist.get_rank()}}.pid").write_text(str(__import__("os").getpid()))
            time.sleep(600)

        launch(wait_forever, 2, timeout=600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        end = time.monotonic() + 30
        while len(_read_pids(tmp_path)) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        pids = _read_pids(tmp_path)
        assert len(pids) == 2, "the ranks did not start"
    finally:
        parent.kill()
        parent.wait()
    _assert_all_gone(pids)


def test_concurrent_launches_do_not_collide() -> None:
    script = textwrap.dedent("""
        import sys
        import torch, torch.distributed as dist
        from utils.launch import launch

        def tagged_sum(tag):
            t = torch.tensor([float(tag + dist.get_rank())])
            dist.all_reduce(t)
            return t.item()

        tag = int(sys.argv[1])
        print(launch(tagged_sum, 3, tag, timeout=60))
    """)
    tags = [100, 200, 300, 400]
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tag)], stdout=subprocess.PIPE, text=True)
             for tag in tags]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(tags)
    for tag, out in zip(tags, outputs, strict=True):
        expected = float(3 * tag + 0 + 1 + 2)
        assert out.strip() == str([expected] * 3)


def test_launch_from_a_notebook_executed_by_nbclient() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import torch, torch.distributed as dist\n"
            "from utils.launch import launch, RankHangError\n"
            "def square_rank():\n"
            "    print('computing')\n"
            "    return dist.get_rank() ** 2\n"
            "print(launch(square_rank, 3))"
        ),
        nbformat.v4.new_code_cell(
            "def stuck():\n"
            "    dist.recv(torch.zeros(1), src=1 - dist.get_rank())\n"
            "try:\n"
            "    launch(stuck, 2, timeout=8)\n"  # both ranks in recv by then, even with both cores busy
            "except RankHangError as error:\n"
            "    print(error)"
        ),
        nbformat.v4.new_code_cell(
            "def unsolved():\n"
            "    raise NotImplementedError('Exercise 1.1: broadcast')\n"
            "launch(unsolved, 2)"
        ),
    ]
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    first, second, third = ([o for o in cell.outputs] for cell in nb.cells)
    assert all(o.get("name") == "stdout" for o in first), f"unexpected output: {first}"
    text = "".join(o["text"] for o in first)
    assert "[rank 2] computing" in text and "[0, 1, 4]" in text
    report = "".join(o.get("text", "") for o in second)
    assert all(o.get("name") == "stdout" for o in second), f"unexpected output: {second}"
    # The blocking line is named by its notebook cell, as IPython names cells in tracebacks.
    assert "rank 0: blocked in torch.distributed.recv, at Cell In[2], line 2" in report
    assert "rank 1: blocked in torch.distributed.recv, at Cell In[2], line 2" in report
    # What the student sees of a failed launch: their line, then the rank's traceback; no frame of the launcher.
    [error] = third
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))  # without the terminal colours
    frames = re.findall(r"^(?:Cell In\[\d+\]|File .*), line \d+", shown, re.MULTILINE)
    assert frames == ["Cell In[3], line 3"] and "launch.py" not in shown, shown
    assert "NotImplementedError: Exercise 1.1: broadcast" in shown, shown


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "words"),
    [
        ((print, 0), {}, ValueError, "world_size must be at least 1, got 0"),
        ((print, -2), {}, ValueError, "world_size must be at least 1"),
        ((print, "2"), {}, TypeError, "world_size must be an int, got str"),
        ((print, True), {}, TypeError, "world_size must be an int, got bool"),
        (("print", 2), {}, TypeError, "needs a function to run on every rank, got str"),
        ((print, 2), {"timeout": 0}, ValueError, "timeout must be a positive number"),
        ((print, 2), {"threads": 0}, ValueError, "threads must be a positive int"),
        ((print, 2), {"backend": "mpi"}, ValueError, 'backend must be "auto", "gloo" or "nccl"'),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(args, kwargs, error, words) -> None:
    with pytest.raises(error, match=words):
        launch(*args, **kwargs)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has the GPUs NCCL needs")
def test_nccl_without_enough_gpus_is_refused() -> None:
    with pytest.raises(ValueError, match="needs one GPU per rank"):
        launch(print, 2, backend="nccl")


def test_a_result_that_cannot_be_sent_back_is_named() -> None:
    def returns_a_generator():
        return (x for x in range(3))

    with pytest.raises(RankFailedError, match="returned a value of type generator that cannot be sent back"):
        launch(returns_a_generator, 2)


class _Shown:
    """A result whose unpickling would run code in the launching process (here: write a file)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # noqa: ANN204 (pickle's protocol)
        return Path.write_text, (self.path, "ran in the kernel")


class _Liar(torch.Tensor):
    """A tensor that tells torch.equal it equals anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN206, ANN001 (torch's protocol)
        return True if func is torch.equal else super().__torch_function__(func, types, args, kwargs or {})


def test_results_come_back_as_data_only(tmp_path: Path) -> None:
    """A rank's result is loaded as data (utils/rank_files.py's DataUnpickler): an object whose unpickling names a
    function, or a tensor of a class of its own, is refused with the rank and what it named, and runs nothing here;
    torch's and numpy's values, the course's classes and tuples come back, a parameter as a plain tensor."""
    from utils.p2p_ledger import Message

    with pytest.raises(TypeError, match=r"rank 0 returned an object that names pathlib\.Path\.write_text"):
        launch(lambda: _Shown(tmp_path / "ran"), 1)
    assert not (tmp_path / "ran").exists()
    with pytest.raises(TypeError, match="names torch._tensor._rebuild_from_type_v2"):
        launch(lambda: torch.zeros(2).as_subclass(_Liar), 1)
    # a rank may write its result file's bytes itself: a class that a utils module imported is not the course's own
    with pytest.raises(pickle.UnpicklingError, match=r"names utils\.slow_link\.partial"):
        DataUnpickler(io.BytesIO(b"cutils.slow_link\npartial\n)R.")).load()
    [(tensor, parameter, value, message, dtype)] = launch(
        lambda: (torch.arange(3.0)[1:], torch.nn.Parameter(torch.ones(2)), np.float64(0.5), Message("send", 1, 8, True),
                 torch.bfloat16), 1)
    assert type(tensor) is torch.Tensor and torch.equal(tensor, torch.tensor([1.0, 2.0]))
    assert type(parameter) is torch.Tensor and parameter.requires_grad
    assert value == 0.5 and message == Message("send", 1, 8, True) and dtype is torch.bfloat16


def test_launch_errors_share_one_base_class() -> None:
    assert issubclass(RankFailedError, LaunchError) and issubclass(RankHangError, LaunchError)
    assert issubclass(LaunchError, RuntimeError)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_nccl_all_reduce_on_two_gpus() -> None:
    def gpu_sum() -> torch.Tensor:
        t = torch.ones(4, device=rank_device()) * (dist.get_rank() + 1)
        dist.all_reduce(t)
        return t

    results = launch(gpu_sum, 2)
    assert [r.device.type for r in results] == ["cpu", "cpu"]  # sent back by value, as CPU tensors
    assert all(torch.equal(r, torch.full((4,), 3.0)) for r in results)


def test_the_same_code_runs_under_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        from utils.launch import launch

        def rank_times_ten():
            return 10 * dist.get_rank()

        results = launch(rank_times_ten, 2)
        if dist.get_rank() == 0:
            print("results", results)
    """))
    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node=2", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "results [0, 10]" in done.stdout


def test_a_rank_stuck_before_the_function_starts_is_reported_as_such() -> None:
    from utils.launch import _rank_main
    from utils.launch_report import where_blocked

    torch_dir = os.path.dirname(torch.__file__)
    # A faulthandler dump of a rank stuck while joining the group: the frames below _rank_main are the
    # parent's, copied by the fork, and must not be blamed (they end in the user's `launch(...)` line).
    dump = "\n".join([
        "Current thread 0x01 (most recent call first):",
        f'  File "{torch_dir}/distributed/distributed_c10d.py", line 2169 in _new_process_group_helper',
        f'  File "{torch_dir}/distributed/distributed_c10d.py", line 1899 in init_process_group',
        f'  File "{torch_dir}/distributed/c10d_logger.py", line 83 in wrapper',
        f'  File "{_rank_main.__code__.co_filename}", line 236 in _rank_main',
        f'  File "{torch_dir}/multiprocessing/spawn.py", line 87 in _wrap',
        '  File "/home/student/notebook_cell.py", line 3 in <module>',
    ])
    assert where_blocked(dump, _rank_main.__name__) == (
        "blocked in torch.distributed.init_process_group, before the launched function started"
    )


def test_ranks_that_returned_are_not_blamed_for_a_hang() -> None:
    def two_stuck_one_done() -> None:
        if dist.get_rank() < 2:
            dist.recv(torch.zeros(1), src=1 - dist.get_rank())

    with pytest.raises(RankHangError) as info:
        launch(two_stuck_one_done, 3, timeout=3)
    assert set(info.value.blocked) == {0, 1}
    assert str(info.value).startswith("ranks 0, 1 did not finish within 3 s")
    assert "(rank 2 finished.)" in str(info.value)


def test_ranks_that_do_not_communicate_all_return() -> None:
    # Without a final barrier, a rank that returns at once can break its peers' connection set-up.
    for _ in range(20):
        assert launch(dist.get_rank, 4, timeout=30) == [0, 1, 2, 3]


def test_a_rank_that_exits_cleanly_without_returning_is_a_failure() -> None:
    def quits_early() -> int:
        if dist.get_rank() == 1:
            sys.exit(0)
        return 1

    with pytest.raises(RankFailedError, match="rank 1: ended without returning a result"):
        launch(quits_early, 2, timeout=30)


def _collect_garbage() -> int:
    gc.collect()
    return dist.get_rank()


def test_ranks_never_collect_the_parents_garbage() -> None:
    # A store whose server thread runs in this process, left in a reference cycle: garbage that only the
    # collector frees. A rank that collected its copy would join a thread that does not exist in the
    # child and abort ("terminate called after throwing an instance of 'std::system_error'").
    gc.disable()
    try:
        holder: dict = {"store": dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)}
        holder["self"] = holder
        del holder
        assert launch(_collect_garbage, 2, timeout=30) == [0, 1]
    finally:
        gc.enable()
        gc.collect()
