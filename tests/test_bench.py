"""The reference all-reduces of benchmark/reference.py and the benchmark of benchmark/bench.py.

- ring, tree, naive and halving-doubling (utils.halving_doubling) equal dist.all_reduce for N = 1..5,
  float32/float64/int64, lengths shorter than N and not divisible by N, with the default segments and with tiny
  ones (many segments per chunk), using only point-to-point messages;
- the ring's traffic per rank is exactly a ring's: 2(N-1) chunks sent to the right, 2(N-1) received from the left
  (segments add messages, never bytes), in segments of segment_for's size (smaller at N = 2);
- `python -m benchmark.bench --quick` writes a CSV with the documented columns and a PNG, and its rows add up;
  the table takes the slowest rank per repetition and pairs repetitions for the ratio;
- its DDP section (benchmark/bench_ddp.py) writes ddp.csv for N = 2, with lab 04's reference BucketedDDP (read from
  the solution notebook) giving torch DDP's gradients, and judges the target on N = 2 only.

No timing assertions: the performance target is the benchmark's verdict, read by a person. About 30 s on 2 cores.
"""

from __future__ import annotations

import collections
import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import benchmark.reference as reference
from benchmark import bench_ddp
from benchmark.bench import COLUMNS, crowding_note, parse_size, rows_for, verdict
from benchmark.bench import IMPLS as BENCH_IMPLS
from benchmark.bench_common import interleaving
from utils.halving_doubling import halving_doubling_all_reduce
from utils.launch import launch
from utils.p2p_ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
IMPLS = {"ring": reference.ring_all_reduce, "tree": reference.tree_all_reduce, "naive": reference.naive_all_reduce,
         "halving": halving_doubling_all_reduce}
DTYPES = (torch.float32, torch.float64, torch.int64)
LENGTHS = (1, 2, 3, 7, 37, 1000)  # shorter than N, not divisible by N, several segments with tiny segments


def _data(length: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int64:
        return torch.randint(-1000, 1000, (length,), generator=generator)
    return torch.randn(length, generator=generator, dtype=torch.float64).to(dtype)


def _compare_with_builtin(segment_bytes: int) -> list[str]:
    """On every rank: each reference implementation against dist.all_reduce; returns what differed."""
    reference.SEGMENT_BYTES = segment_bytes  # this rank is a forked copy: the parent's module is untouched
    rank, problems = dist.get_rank(), []
    for dtype in DTYPES:
        for length in LENGTHS:
            data = _data(length, dtype, seed=1000 * rank + length)
            expected = data.clone()
            dist.all_reduce(expected)
            for name, impl in IMPLS.items():
                result = data.clone().view(1, -1)  # any contiguous shape
                with Ledger(forbid_collectives=True):  # point-to-point messages only
                    impl(result)
                # Floats: the summation order differs from Gloo's, so equal up to float32 rounding of N terms.
                if result.dtype != dtype or not torch.allclose(result.view(-1), expected, rtol=1e-5, atol=1e-5):
                    problems.append(f"{name} {dtype} length {length}")
    return problems


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_reference_all_reduces_equal_the_builtin(world: int) -> None:
    results = launch(_compare_with_builtin, world, reference.SEGMENT_BYTES, timeout=60)
    assert results == [[]] * world
    if world == 3:  # tiny segments: 16 bytes, so chunks of 1000 / 3 elements travel in many pieces
        assert launch(_compare_with_builtin, world, 16, timeout=60) == [[]] * world


def _ring_traffic(length: int, segment_bytes: int) -> list:
    reference.SEGMENT_BYTES = segment_bytes
    tensor = torch.ones(length, dtype=torch.float64)
    with Ledger() as ledger:
        reference.ring_all_reduce(tensor)
    assert torch.equal(tensor, torch.full_like(tensor, dist.get_world_size()))
    return ledger.messages


@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize(("length", "segment_bytes"), [(1003, 1 << 20), (1003, 64), (3, 64)])
def test_ring_traffic_is_exactly_two_n_minus_one_chunks_per_rank(world: int, length: int, segment_bytes: int) -> None:
    sizes = [len(chunk) for chunk in torch.tensor_split(torch.empty(length), world)]
    for rank, messages in enumerate(launch(_ring_traffic, world, length, segment_bytes, timeout=60)):
        sent = [m for m in messages if m.kind == "send"]
        received = [m for m in messages if m.kind == "recv"]
        assert {m.peer for m in sent} <= {(rank + 1) % world} and {m.peer for m in received} <= {(rank - 1) % world}
        # Step t sends chunk (r - t) mod N and receives chunk (r - t - 1) mod N, for t = 0 .. 2N - 3.
        steps = range(2 * (world - 1))
        assert sum(m.nbytes for m in sent) == 8 * sum(sizes[(rank - t) % world] for t in steps)
        assert sum(m.nbytes for m in received) == 8 * sum(sizes[(rank - t - 1) % world] for t in steps)
        if segment_bytes == 1 << 20:  # chunks below a segment: one message per non-empty chunk and step
            assert len(sent) == len(received) == 2 * (world - 1)
        assert all(0 < m.nbytes <= max(segment_bytes, 8) for m in sent + received)


def _sends(numel: int) -> list[int]:
    tensor = torch.ones(numel)  # float32
    with Ledger() as ledger:
        reference.ring_all_reduce(tensor)
    return [m.nbytes for m in ledger.messages if m.kind == "send"]


def test_the_ring_cuts_chunks_into_pieces_of_segment_for_at_two_ranks_only() -> None:
    """An 8 MiB tensor: at N = 2 its chunks of 4 MiB go in two 2 MiB segments (segment_for), so 4 sends per rank; at
    N = 4 its chunks of 2 MiB go whole, one send per step (6)."""
    assert launch(_sends, 2, 2 << 20, timeout=60) == [[2 << 20] * 4] * 2
    assert launch(_sends, 4, 2 << 20, timeout=60) == [[2 << 20] * 6] * 4


@pytest.mark.parametrize("count", range(2, 8))
def test_every_implementation_runs_right_after_every_other_equally_often(count: int) -> None:
    """Over a cycle of repetitions (count of them, 2 * count for an odd count), each a permutation: a plain rotation
    fails this (b runs right after a in all but one of its repetitions, never a right after b)."""
    names = [f"impl{i}" for i in range(count)]
    neighbours: collections.Counter = collections.Counter()
    for repetition in range(2 * count if count % 2 else count):
        order = interleaving(names, repetition)
        assert sorted(order) == names
        neighbours.update(zip(order, order[1:], strict=False))
    assert len(neighbours) == count * (count - 1) and len(set(neighbours.values())) == 1


def test_quick_benchmark_writes_a_consistent_csv_and_a_png(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "benchmark.bench", "--quick", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    assert "N=3" in run.stdout and "reference ring / built-in busbw" in run.stdout  # progress and verdict
    with open(tmp_path / "allreduce.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        rows = list(reader)
    assert {(r["impl"], r["N"]) for r in rows} == {(i, n) for i in BENCH_IMPLS for n in "23"}
    assert len(rows) == len(BENCH_IMPLS) * 2 * 3  # impls x world sizes x quick sizes
    builtin = {(r["N"], r["size_bytes"]): float(r["busbw_GBps"]) for r in rows if r["impl"] == "builtin"}
    for r in rows:
        n, size, time_us = int(r["N"]), int(r["size_bytes"]), float(r["time_us"])
        algbw, busbw = float(r["algbw_GBps"]), float(r["busbw_GBps"])
        assert int(r["count"]) * 4 == size and time_us > 0
        assert math.isclose(algbw, size / (time_us * 1e-6) / 1e9, rel_tol=1e-4)
        assert math.isclose(busbw, algbw * 2 * (n - 1) / n, rel_tol=1e-4)
        assert float(r["ratio"]) > 0 and builtin[r["N"], r["size_bytes"]] > 0
        if r["impl"] == "builtin":
            assert float(r["ratio"]) == 1.0
    assert (tmp_path / "allreduce.png").read_bytes().startswith(b"\x89PNG")
    with open(tmp_path / "ddp.csv", newline="") as f:
        ddp = list(csv.DictReader(f))
    assert [(r["impl"], r["N"]) for r in ddp] == [("bucketed", "2"), ("torch", "2"), ("after", "2")]
    assert all(float(r["step_ms"]) > 0 for r in ddp) and float(ddp[1]["ratio_torch"]) == 1.0
    assert "reference BucketedDDP / torch DDP step time at N=2" in run.stdout


def test_ddp_rows_pair_repetitions_and_the_verdict_judges_n_2() -> None:
    # Two ranks, three repetitions; the slowest rank per repetition, then paired ratios.
    times = {"bucketed": [1.0, 2.0, 3.0], "torch": [1.0, 1.0, 3.0], "after": [2.0, 2.0, 2.0]}
    per_rank = [{"times": times, "gap": 1e-7, "params": 10},
                {"times": {k: [t / 2 for t in v] for k, v in times.items()}, "gap": 2e-7, "params": 10}]
    rows = {r["impl"]: r for r in bench_ddp.rows_for(2, 4.0, per_rank)}
    assert rows["bucketed"]["step_ms"] == 2000.0 and rows["bucketed"]["ratio_torch"] == 1.0  # median(1, 2, 1)
    assert rows["bucketed"]["ratio_after"] == 1.0 and rows["bucketed"]["gap"] == 2e-7  # median(0.5, 1, 1.5)
    assert bench_ddp.verdict(list(rows.values())).endswith("met")
    slow = [dict(rows["bucketed"], ratio_torch=1.2)]
    assert bench_ddp.verdict(slow).endswith("NOT met") and "N = 2 not measured" in bench_ddp.verdict([])
    assert bench_ddp.verdict([dict(rows["bucketed"], gap=1e-3)]).endswith("NOT met")  # gradients differ


def test_rows_take_the_slowest_rank_and_pair_repetitions_for_the_ratio() -> None:
    # Two ranks, three repetitions of 1 MB; rank 1 is the slower one in some repetitions.
    # CPU times: the same numbers halved on rank 0, so the sums over ranks are builtin [1.0, 3.5, 4.5] and ring
    # [2.5, 5.0, 2.5]: paired ratios 0.4, 0.7, 1.8.
    wall = [{"builtin": {1 << 20: [1.0, 2.0, 3.0]}, "ring": {1 << 20: [2.0, 2.0, 1.0]}},
            {"builtin": {1 << 20: [0.5, 2.5, 3.0]}, "ring": {1 << 20: [1.5, 4.0, 2.0]}}]
    halved = {name: {size: [t / 2 for t in times] for size, times in by_size.items()}
              for name, by_size in wall[0].items()}
    cpu = [halved, wall[1]]
    per_rank = [{"wall": w, "cpu": c} for w, c in zip(wall, cpu, strict=True)]
    rows = {r["impl"]: r for r in rows_for(2, per_rank)}
    # Slowest rank per repetition: builtin [1.0, 2.5, 3.0], ring [2.0, 4.0, 2.0]; medians 2.5 s and 2.0 s.
    assert rows["builtin"]["time_us"] == 2.5e6 and rows["ring"]["time_us"] == 2.0e6
    assert math.isclose(rows["ring"]["algbw_GBps"], (1 << 20) / 2.0 / 1e9)
    assert math.isclose(rows["ring"]["busbw_GBps"], rows["ring"]["algbw_GBps"])  # 2(N-1)/N = 1 for N = 2
    # Paired ratios builtin / ring: 0.5, 0.625, 1.5 -> median 0.625, not the ratio of medians (2.5 / 2.0).
    assert rows["ring"]["ratio"] == 0.625 and rows["builtin"]["ratio"] == 1.0
    assert math.isclose(rows["ring"]["cpu_ratio"], 0.7) and rows["builtin"]["cpu_ratio"] == 1.0
    alone = rows_for(2, [{"wall": {"ring": {1 << 20: [1.0]}}, "cpu": {"ring": {1 << 20: [1.0]}}}])[0]
    assert math.isnan(alone["ratio"]) and math.isnan(alone["cpu_ratio"])  # no builtin: no ratio


def test_size_parsing_and_verdict_without_large_sizes() -> None:
    assert [parse_size(s) for s in ("4K", "64M", "1000", "2MB")] == [4096, 64 << 20, 1000, 2 << 20]
    rows = [{"impl": "ring", "N": 2, "size_bytes": 4 << 20, "ratio": 0.95},
            {"impl": "ring", "N": 2, "size_bytes": 64 << 20, "ratio": 0.85},
            {"impl": "ring", "N": 2, "size_bytes": 16 << 20, "ratio": 0.92},
            {"impl": "ring", "N": 2, "size_bytes": 1 << 20, "ratio": 0.10}]  # below 4 MB: not judged
    assert "N=2: 0.92" in verdict(rows) and verdict(rows).endswith(">= 0.9: met")
    assert "not judged" in verdict(rows[3:])


def test_crowding_note_only_where_ranks_outnumber_cores() -> None:
    rows = [{"impl": "ring", "N": n, "size_bytes": size, "ratio": ratio, "cpu_ratio": cpu}
            for n, ratio, cpu in [(2, 1.1, 1.0), (3, 0.88, 0.86), (4, 0.93, 0.95)] for size in (4 << 20, 64 << 20)]
    note = crowding_note(rows, cores=2)
    assert "N=3: wall 0.88, CPU 0.86" in note and "N=4: wall 0.93, CPU 0.95" in note and "N=2" not in note
    assert crowding_note(rows, cores=4) is None  # every N fits the cores
