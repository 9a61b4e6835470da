"""All-reduce benchmark, nccl-tests style: the built-in dist.all_reduce against the reference implementations.

    python -m benchmark.bench                   # N = 2, 3, 4; 4 KB .. 64 MB; about 2 minutes on 2 cores
    python -m benchmark.bench --quick           # smoke run: N = 2, 3; three small sizes; seconds
    python -m benchmark.bench --sizes 4M 64M --world-sizes 2 4 --impls builtin ring --out results/
    python -m benchmark.bench --section ddp     # only lab 04's DDP section (benchmark/bench_ddp.py): N = 2, 4

Every rank is a local process (Gloo on CPU), started by utils.launch, one launch per world size. The same
script runs under torchrun, at torchrun's world size, on one node or several; only rank 0 writes files:

    torchrun --standalone --nproc-per-node=4 -m benchmark.bench
    torchrun --nnodes=2 --nproc-per-node=4 --node-rank=0 --rdzv-endpoint=HOST:PORT -m benchmark.bench  # node 0
    torchrun --nnodes=2 --nproc-per-node=4 --node-rank=1 --rdzv-endpoint=HOST:PORT -m benchmark.bench  # node 1

Output (in --out, default bench-results/): allreduce.csv and allreduce.png (busbw against size, one line per
implementation, one panel per world size). The CSV's columns, one row per implementation, N and size:

    impl         builtin (dist.all_reduce), ring, tree or naive (benchmark.reference), or halving
                 (utils.halving_doubling: recursive halving-doubling, lab 02's worked algorithm)
    N            world size
    size_bytes   tensor size in bytes (float32)
    count        tensor size in elements
    time_us      median over repetitions of the slowest rank's time for one all-reduce, in microseconds
    algbw_GBps   size_bytes / time, in GB/s (1e9 bytes per second)
    busbw_GBps   algbw * 2(N-1)/N: what each link carries, comparable with 1/beta (the nccl-tests convention)
    ratio        busbw relative to builtin at the same N and size: the median over repetitions of
                 (builtin's time / this implementation's time) within the same repetition
    cpu_ratio    the same for CPU time: builtin's / this implementation's, each summed over the ranks (every
                 thread of each rank's process: Gloo's I/O and work threads too), paired by repetition

How it measures: for each size and repetition, every implementation runs in turn on the same ranks (interleaved, in
a balanced order: each runs right after each other one equally often, bench_common.interleaving), each call right
after a barrier, so a burst of load from elsewhere hits all of them alike. The first repetition is a warm-up and is
dropped; repeats adapt to the size (15 at 64 MB, 40 at 8 MB and below). The ratio pairs the calls of one repetition,
which ran moments apart, before taking the median: load that drifts over seconds cancels in each pair instead of
widening both medians. With 4 ranks on 2 cores the ranks are oversubscribed: absolute numbers wobble, which is why
the ratio, from one run, is what counts; on a machine that other jobs load, expect the ratio to wobble as well.

The performance target of lab 02's reference ring, printed at the end: reference ring / built-in busbw, median
over sizes >= 4 MB, at least 0.9 for every N. Never benchmark with TORCH_DISTRIBUTED_DEBUG=DETAIL (it adds a
barrier to every collective).

What limits the ratio when there are more ranks than cores (N = 3 and 4 on 2 cores): the ranks then take turns on
the cores, which stay busy, so an all-reduce takes about its CPU time divided by the cores, whatever its schedule.
The wall ratio then follows the CPU-time ratio, and a ring driven from Python, which pays 50-100 us of CPU per
message that Gloo's C++ ring does not, cannot beat it. Measured on 2 cores (median of paired ratios, N = 3 and 4,
4-64 MB): wall ratio and cpu_ratio within about 0.1 of each other; with N = 2 on 2 cores, the wall ratio above
the CPU ratio (idle cores hide the cost). So the printed cpu_ratio at N > cores says how much of the gap is CPU,
and the fair comparison of the rings' schedules is at N <= cores; both lines are printed.

Then the DDP section (benchmark/bench_ddp.py, its own docstring): lab 04's reference BucketedDDP against torch's
DistributedDataParallel, N = 2 and 4 (--quick: N = 2, a smaller model), written to ddp.csv, with its own verdict
line (within 1.15x of torch's step time at N = 2). --section chooses one of the two.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from benchmark import bench_ddp
from benchmark.bench_common import interleaving, paired_ratio, write_csv
from benchmark.reference import naive_all_reduce, preload, ring_all_reduce, tree_all_reduce
from utils.halving_doubling import halving_doubling_all_reduce
from utils.launch import launch, rank_device, synchronize

COLUMNS = ["impl", "N", "size_bytes", "count", "time_us", "algbw_GBps", "busbw_GBps", "ratio", "cpu_ratio"]
IMPLS: dict[str, Callable[[torch.Tensor], object]] = {
    "builtin": dist.all_reduce,
    "ring": ring_all_reduce,
    "tree": tree_all_reduce,
    "naive": naive_all_reduce,
    "halving": halving_doubling_all_reduce,
}
DEFAULT_SIZES = [4 << 10 << i for i in range(15)]  # 4 KB, 8 KB, ..., 64 MB: powers of 2, as nccl-tests' -f 2
QUICK_SIZES = [4 << 10, 64 << 10, 1 << 20]
TARGET_MIN_BYTES = 4 << 20  # the target is judged on sizes of 4 MB and above
TARGET_RATIO = 0.9
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def repeats(size: int, quick: bool = False) -> int:
    """Timed repetitions for a tensor of `size` bytes: many for small ones (noisy, cheap), fewer for big ones."""
    if quick:
        return 3
    return max(15, min(40, (512 << 20) // size))  # 64 MB: 15, 32 MB: 16, 16 MB: 32, 8 MB and below: 40


def parse_size(text: str) -> int:
    """'4K' -> 4096, '64M' -> 67108864, '1000' -> 1000 (bytes; a multiple of 4, the size of a float32)."""
    text = text.strip().upper().removesuffix("B")
    size = int(text[:-1]) * _UNITS[text[-1]] if text and text[-1] in _UNITS else int(text)
    if size <= 0 or size % 4:
        raise argparse.ArgumentTypeError(f"size must be a positive multiple of 4 bytes, got {text!r}")
    return size


def human(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size >= _UNITS[unit] and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]} {unit}B"
    return f"{size} B"


# ------------------------------------------------------------------------------------------ on every rank


Times = dict[str, dict[int, list[float]]]  # {impl: {size: [seconds per repetition]}}


def measure(sizes: list[int], impls: list[str], quick: bool, started: float) -> dict[str, Times]:
    """On every rank: {"wall": Times, "cpu": Times}, warm-up excluded. Rank 0 prints progress.

    "cpu" is this rank's process CPU time per call (all its threads), "wall" the elapsed time.
    """
    rank, world, device = dist.get_rank(), dist.get_world_size(), rank_device()
    times: Times = {name: {} for name in impls}
    cpu: Times = {name: {} for name in impls}
    for index, size in enumerate(sizes):
        if rank == 0:
            print(f"N={world}  size {human(size):>6} ({index + 1}/{len(sizes)})  "
                  f"elapsed {time.time() - started:5.0f} s", flush=True)
        tensor = torch.empty(size // 4, dtype=torch.float32, device=device)
        for name in impls:
            times[name][size], cpu[name][size] = [], []
        for repetition in range(repeats(size, quick) + 1):  # repetition 0 is the warm-up
            # Interleaved: every implementation once per repetition, in an order in which each one runs right
            # after each other one equally often (a call's neighbour before it changes its time by a few %).
            for name in interleaving(impls, repetition):
                tensor.fill_(1.0)  # same data every call (repeated sums would overflow to inf)
                dist.barrier()
                synchronize(device)
                start, start_cpu = time.perf_counter(), time.process_time()
                IMPLS[name](tensor)
                synchronize(device)
                elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
                if repetition:
                    times[name][size].append(elapsed)
                    cpu[name][size].append(elapsed_cpu)
        del tensor
    return {"wall": times, "cpu": cpu}


# --------------------------------------------------------------------------------------------- the table


def _per_repetition(per_rank: list[Times], combine: Callable[..., float]) -> dict[tuple[str, int], list[float]]:
    """{(impl, size): [combine(rank 0's, rank 1's, ...) for each repetition]}."""
    return {(name, size): [combine(values) for values in zip(*(ranks[name][size] for ranks in per_rank), strict=True)]
            for name, by_size in per_rank[0].items() for size in by_size}


def _versus_builtin(times: dict[tuple[str, int], list[float]], name: str, size: int) -> float:
    """builtin's times over `name`'s at `size`, paired by repetition (nan where builtin was not measured)."""
    baseline = times.get(("builtin", size))
    return paired_ratio(baseline, times[name, size]) if baseline else math.nan


def rows_for(world: int, per_rank: list[dict[str, Times]]) -> list[dict]:
    """One row per (impl, size): a repetition takes as long as its slowest rank; report the median repetition.

    `ratio` is the median over repetitions of builtin's time / this implementation's time in the same repetition
    (nan without builtin). Example: builtin [1, 2, 3] s and ring [2, 2, 2] s give ratio median(0.5, 1, 1.5) = 1.
    `cpu_ratio` pairs the CPU times the same way, each repetition's summed over the ranks.
    """
    slowest = _per_repetition([r["wall"] for r in per_rank], max)
    cpu = _per_repetition([r["cpu"] for r in per_rank], sum)
    rows = []
    for (name, size), repetitions in slowest.items():
        seconds = statistics.median(repetitions)
        algbw = size / seconds / 1e9
        rows.append({"impl": name, "N": world, "size_bytes": size, "count": size // 4, "time_us": seconds * 1e6,
                     "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (world - 1) / world,
                     "ratio": _versus_builtin(slowest, name, size), "cpu_ratio": _versus_builtin(cpu, name, size)})
    return rows


def format_table(rows: list[dict]) -> str:
    header = (f"{'impl':>8} {'N':>2} {'size (B)':>10} {'count':>9} {'time (us)':>11} "
              f"{'algbw':>7} {'busbw':>7} {'ratio':>6} {'cpu':>6}")
    lines = [header, f"{'':>45}{'(GB/s)':>8}{'(GB/s)':>8}"]
    for r in sorted(rows, key=lambda r: (r["N"], r["size_bytes"], list(IMPLS).index(r["impl"]))):
        lines.append(f"{r['impl']:>8} {r['N']:>2} {r['size_bytes']:>10} {r['count']:>9} {r['time_us']:>11.1f} "
                     f"{r['algbw_GBps']:>7.3f} {r['busbw_GBps']:>7.3f} {r['ratio']:>6.2f} {r['cpu_ratio']:>6.2f}")
    return "\n".join(lines)


def _ring_medians(rows: list[dict], key: str) -> dict[int, float]:
    """{N: median over sizes >= 4 MB of the ring's `key` ("ratio" or "cpu_ratio")}, where it was measured."""
    values: dict[int, list[float]] = {}
    for r in rows:
        value = r.get(key, math.nan)
        if r["impl"] == "ring" and r["size_bytes"] >= TARGET_MIN_BYTES and value == value:  # nan != nan
            values.setdefault(r["N"], []).append(value)
    return {n: statistics.median(v) for n, v in sorted(values.items())}


def verdict(rows: list[dict]) -> str:
    """The performance target: reference ring / built-in busbw, median over sizes >= 4 MB, per N, >= 0.9."""
    per_n = _ring_medians(rows, "ratio")
    if not per_n:
        return ("reference ring / built-in busbw: no sizes >= 4 MB with both measured, target not judged "
                "(run without --quick, with ring and builtin in --impls)")
    passed = all(value >= TARGET_RATIO for value in per_n.values())
    listed = ", ".join(f"N={n}: {value:.2f}" for n, value in per_n.items())
    return (f"reference ring / built-in busbw, median over sizes >= 4 MB, per N: {listed}, target >= {TARGET_RATIO}: "
            + ("met" if passed else "NOT met"))


def crowding_note(rows: list[dict], cores: int) -> str | None:
    """At world sizes above `cores`, the ring's CPU-time ratio next to its wall ratio (None where N <= cores).

    With more ranks than cores, the cores stay busy and an all-reduce takes about its CPU time over the cores:
    the wall ratio follows the CPU-time ratio, which a ring driven from Python cannot raise above Gloo's.
    """
    wall, cpu = _ring_medians(rows, "ratio"), _ring_medians(rows, "cpu_ratio")
    crowded = [n for n in cpu if n > cores and n in wall]
    if not crowded:
        return None
    listed = ", ".join(f"N={n}: wall {wall[n]:.2f}, CPU {cpu[n]:.2f}" for n in crowded)
    return (f"more ranks than this machine's {cores} cores: the ranks take turns on them, so the wall ratio follows "
            f"built-in / ring CPU time per call (summed over ranks, median over sizes >= 4 MB): {listed}. Python's "
            f"cost per message is CPU that Gloo's ring does not spend; compare the rings' schedules at N <= {cores}.")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    worlds = sorted({r["N"] for r in rows})
    fig, axes = plt.subplots(1, len(worlds), figsize=(4.5 * len(worlds), 3.8), sharey=True, squeeze=False)
    for ax, world in zip(axes[0], worlds, strict=True):
        for name in IMPLS:
            mine = sorted((r["size_bytes"], r["busbw_GBps"]) for r in rows if r["N"] == world and r["impl"] == name)
            if mine:
                ax.plot(*zip(*mine, strict=True), marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_title(f"N = {world}")
        ax.set_xlabel("size (bytes)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("busbw (GB/s)")
    axes[0][-1].legend()
    fig.suptitle("all-reduce bus bandwidth (Gloo, float32, median)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: N = 2, 3, sizes 4K 64K 1M, 3 repeats")
    parser.add_argument("--sizes", nargs="+", type=parse_size, metavar="SIZE", help="bytes, e.g. 4K 1M 64M")
    parser.add_argument("--world-sizes", nargs="+", type=int, metavar="N", help="default 2 3 4 (--quick: 2 3)")
    parser.add_argument("--impls", nargs="+", choices=list(IMPLS), default=list(IMPLS), metavar="IMPL",
                        help=f"any of {', '.join(IMPLS)} (default: all)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"),
                        help="output folder (default bench-results/)")
    parser.add_argument("--section", choices=["all", "allreduce", "ddp"], default="all",
                        help="the all-reduce section, lab 04's DDP section, or both (default)")
    parser.add_argument("--ddp-cap", type=float, default=4.0, metavar="MIB",
                        help="bucket_cap_mb of both DDPs in the DDP section (default 4: one layer per bucket)")
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)))
    impls = [name for name in IMPLS if name in args.impls]  # builtin first, whatever the order given
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        print("warning: TORCH_DISTRIBUTED_DEBUG=DETAIL adds a barrier per collective; timings are meaningless",
              file=sys.stderr)
    under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    if under_torchrun:
        worlds = [int(os.environ["WORLD_SIZE"])]
        if args.world_sizes not in (None, worlds):
            parser.error(f"under torchrun the world size is torchrun's ({worlds[0]}); drop --world-sizes")
        writer = int(os.environ["RANK"]) == 0
    else:
        worlds = args.world_sizes or ([2, 3] if args.quick else [2, 3, 4])
        writer = True
    if any(n < 1 for n in worlds):
        parser.error("world sizes must be at least 1")

    preload()  # the solutions' cells, read here once: every forked rank inherits them
    if args.section != "allreduce":
        ddp_worlds = worlds if under_torchrun or args.world_sizes else ([2] if args.quick else [2, 4])
        bench_ddp.run(ddp_worlds, args.ddp_cap, args.quick, args.out, writer)
    if args.section == "ddp":
        return 0
    started = time.time()
    rows: list[dict] = []
    for world in worlds:
        # Generous bound: a run of 64 MB at N = 4 takes about a minute; a hang still ends, with a report.
        per_rank = launch(measure, world, sizes, impls, args.quick, started, timeout=1800.0)
        rows += rows_for(world, per_rank)
    if not writer:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, COLUMNS, args.out / "allreduce.csv")
    plot(rows, args.out / "allreduce.png")
    print(format_table(rows))
    print(f"wrote {args.out / 'allreduce.csv'} and {args.out / 'allreduce.png'} in {time.time() - started:.0f} s")
    print(verdict(rows))
    # All the nodes' cores (torchrun: WORLD_SIZE / LOCAL_WORLD_SIZE nodes, assumed alike).
    nodes = int(os.environ.get("WORLD_SIZE", 1)) // int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    note = crowding_note(rows, len(os.sched_getaffinity(0)) * max(nodes, 1))
    if note:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
