"""How many students' 4-rank launches one core serves: K students launching at once, on one core, against one alone.

    .venv/bin/python -m classroom.hub.measure [--cores 0] [--students 1 2 4 8] [--rounds 3]

Each "student" is a process that has imported torch and the course's launcher, as a student's kernel has, pinned to
the given cores (sched_setaffinity: its ranks inherit it, as a cgroup's CPU quota would bound them). On a signal,
all K students run one lab 00-like step at the same time: `launch(step, 4)`, four Gloo ranks forked from the
student's process, each sending 1 MB round a ring ten times and all-reducing it ten times. The measure is the wall
time of each student's launch, fork to results, against one student alone on the same cores in the same run (a
ratio, rounds interleaved: K = 1, 2, 4, 8, then again). A core serves K students at once when their launches take
K times as long as one alone (the core is shared fairly, nothing thrashes); the output says how far from that each
K is, and the CPU time one launch costs, from which the guide in docs/hub.md (*How big a server*) is worked out.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

import psutil

READY, GO = "ready", "go"
MESSAGE_FLOATS = 1 << 18  # 1 MB of float32
REPEATS = 10


def step() -> float:
    """The rank's part of a lab 00-like step: a ring shift and an all-reduce of 1 MB, REPEATS times each."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    data = torch.ones(MESSAGE_FLOATS)
    incoming = torch.empty_like(data)
    for _ in range(REPEATS):
        ops = [dist.P2POp(dist.isend, data, (rank + 1) % world), dist.P2POp(dist.irecv, incoming, (rank - 1) % world)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        dist.all_reduce(data)
        data /= world
    return float(data[0])


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its children that have ended (the launch's ranks)."""
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def memory_bytes() -> int:
    """The proportional set size of this process and its children (forked ranks share pages: PSS counts each once)."""
    me = psutil.Process()
    total = 0
    for proc in [me, *me.children(recursive=True)]:
        try:
            total += proc.memory_full_info().pss
        except psutil.Error:  # a rank that just ended
            continue
    return total


def student(ranks: int) -> None:
    """One student's kernel: import, say ready, wait for the go, launch once; print the launch's wall seconds, CPU
    seconds (kernel and ranks) and peak memory (sampled every 50 ms)."""
    from utils.launch import launch

    print(READY, flush=True)
    sys.stdin.readline()
    peak, done = [memory_bytes()], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak.append(memory_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    cpu, start = cpu_seconds(), time.perf_counter()
    sampler.start()
    launch(step, ranks)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    print(f"{wall:.4f} {cpu_seconds() - cpu:.4f} {max(peak)}", flush=True)


def run_round(k: int, cores: set[int], ranks: int) -> list[tuple[float, float, int]]:
    """K students launching at once on `cores`; each one's launch (wall s, CPU s, peak bytes)."""
    procs = [subprocess.Popen([sys.executable, "-m", "classroom.hub.measure", "--student", str(ranks)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, cores)) for _ in range(k)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == READY, "a student process did not start"
        for proc in procs:
            proc.stdin.write(GO + "\n")
            proc.stdin.flush()
        lines = [proc.stdout.readline().split() for proc in procs]
        return [(float(wall), float(cpu), int(peak)) for wall, cpu, peak in lines]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, nargs="+", default=[0], help="the cores every student is pinned to")
    parser.add_argument("--students", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--student", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.student:
        return student(args.student)
    cores = set(args.cores)
    runs: dict[int, list[tuple[float, float, int]]] = {k: [] for k in args.students}
    for _ in range(args.rounds):
        for k in args.students:
            runs[k] += run_round(k, cores, args.ranks)
    walls = {k: [r[0] for r in rs] for k, rs in runs.items()}
    alone = statistics.median(walls[1]) if 1 in walls else None
    print(f"{args.ranks}-rank launches on {len(cores)} core(s) {sorted(cores)}, {args.rounds} rounds, medians:")
    for k, seconds in walls.items():
        median = statistics.median(seconds)
        fair = f", {median / (k * alone):.2f} x K x alone" if alone else ""
        print(f"  K = {k}: {median:.2f} s per launch ({min(seconds):.2f}-{max(seconds):.2f}){fair}")
    every = [r for rs in runs.values() for r in rs]
    cpu = statistics.median(r[1] for r in every)
    peaks = [r[2] / (1 << 20) for r in every]
    print(f"CPU time of one launch (kernel and ranks, whatever K): median {cpu:.2f} s, so one core completes at most "
          f"{60 / cpu:.0f} launches a minute; peak memory of a student's kernel and ranks (PSS): median "
          f"{statistics.median(peaks):.0f} MB, max {max(peaks):.0f} MB")


if __name__ == "__main__":
    main()
