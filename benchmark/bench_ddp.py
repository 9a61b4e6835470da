"""The DDP section of `make bench`: lab 04's reference BucketedDDP against torch's DistributedDataParallel.

    python -m benchmark.bench --section ddp                     # N = 2 and 4, an MLP of 4.2 M parameters
    python -m benchmark.bench --section ddp --ddp-cap 8 --world-sizes 2

For each world size, every rank trains the same model (one Linear(1024, 1024) + ReLU per layer, 4 layers, 16 MiB
of float32 gradients; --quick: 1.1 M parameters) on its own batch of 32, three ways, interleaved repetition by
repetition (each step right after a barrier, so load from elsewhere hits all alike):

    bucketed     the reference BucketedDDP (lab 04's solution) at bucket_cap_mb = --ddp-cap
    torch        torch's DistributedDataParallel at the same bucket_cap_mb
    after        no overlap: backward, then the same buckets all-reduced one after the other

A step is zero_grad, forward, MSE loss, backward and the synchronisation; its time is the slowest rank's, and a
ratio is the median over repetitions of the ratio within one repetition (as in the all-reduce section). Before
timing, the first step's gradients of `bucketed` and `torch` are compared: the largest difference relative to the
largest gradient.

Output (in --out): ddp.csv, one row per N and variant: impl, N, cap_mb, params, step_ms (median), ratio_torch
(this / torch, paired), ratio_after (this / after, paired). The verdict line: bucketed / torch at N = 2 at most
TARGET_RATIO, with gradients equal to fp32 tolerance (GRAD_TOLERANCE, relative).

The reference BucketedDDP is read from the solution notebook (benchmark.reference.bucketed_ddp), the one place it
is written; nothing here ships to students.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from benchmark.bench_common import interleaving, paired_ratio, write_csv
from benchmark.reference import bucketed_ddp
from utils.launch import launch, rank_device, synchronize

COLUMNS = ["impl", "N", "cap_mb", "params", "step_ms", "ratio_torch", "ratio_after"]
IMPLS = ("bucketed", "torch", "after")
TARGET_RATIO = 1.15  # bucketed / torch step time at N = 2
GRAD_TOLERANCE = 1e-5  # |bucketed - torch| / max |torch|: float32 sums of N terms in different groupings
WIDTH, LAYERS, BATCH = 1024, 4, 32
QUICK_WIDTH = 512


def build_model(width: int, layers: int, device: torch.device) -> nn.Module:
    """LAYERS x (Linear(width, width), ReLU), seeded identically on every rank."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]).to(device)
    torch.random.set_rng_state(generator_state)
    return model


def after_backward(model: nn.Module, buckets: list[list[str]]) -> None:
    """No overlap: all-reduce `buckets` (parameter names) one after the other, once backward is over."""
    params = dict(model.named_parameters())
    world = dist.get_world_size()
    for names in buckets:
        grads = [params[name].grad for name in names]
        flat = torch.cat([g.view(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= world
        for g, chunk in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(chunk.view_as(g))


def measure(cap_mb: float, width: int, repeats: int) -> dict:
    """On every rank: {impl: [seconds per repetition]}, the gradient gap and the parameter count."""
    device, rank = rank_device(), dist.get_rank()
    generator = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(BATCH, width, generator=generator).to(device)  # this rank's batch
    y = torch.randn(BATCH, width, generator=generator).to(device)
    models = {name: build_model(width, LAYERS, device) for name in IMPLS}
    ours = bucketed_ddp()(models["bucketed"], cap_mb)
    wrapped = {"bucketed": ours, "torch": nn.parallel.DistributedDataParallel(models["torch"], bucket_cap_mb=cap_mb),
               "after": models["after"]}
    finish = {"bucketed": ours.finish_gradient_synchronization, "torch": lambda: None,
              "after": lambda: after_backward(models["after"], ours.buckets)}

    def step(name: str) -> None:
        models[name].zero_grad(set_to_none=True)
        F.mse_loss(wrapped[name](x), y).backward()
        finish[name]()

    for name in ("bucketed", "torch"):
        step(name)
    pairs = [(p.grad, q.grad) for p, q in zip(models["bucketed"].parameters(), models["torch"].parameters(),
                                              strict=True)]
    scale = max(q.abs().max().item() for _, q in pairs)
    gap = max((p - q).abs().max().item() for p, q in pairs) / scale
    times: dict[str, list[float]] = {name: [] for name in IMPLS}
    for repetition in range(repeats + 1):  # repetition 0 warms up (torch's DDP also rebuilds its buckets there)
        for name in interleaving(IMPLS, repetition):
            dist.barrier()
            synchronize(device)
            start = time.perf_counter()
            step(name)
            synchronize(device)
            if repetition:
                times[name].append(time.perf_counter() - start)
    return {"times": times, "gap": gap, "params": sum(p.numel() for p in models["torch"].parameters())}


def rows_for(world: int, cap_mb: float, per_rank: list[dict]) -> list[dict]:
    """One row per impl: the slowest rank per repetition, medians, and ratios paired within repetitions."""
    slowest = {name: [max(ts) for ts in zip(*(r["times"][name] for r in per_rank), strict=True)] for name in IMPLS}
    return [{"impl": name, "N": world, "cap_mb": cap_mb, "params": per_rank[0]["params"],
             "step_ms": statistics.median(slowest[name]) * 1e3,
             "ratio_torch": paired_ratio(slowest[name], slowest["torch"]),
             "ratio_after": paired_ratio(slowest[name], slowest["after"]), "gap": max(r["gap"] for r in per_rank)}
            for name in IMPLS]


def verdict(rows: list[dict]) -> str:
    """The target: bucketed / torch step time at N = 2 within TARGET_RATIO, gradients equal to GRAD_TOLERANCE."""
    mine = [r for r in rows if r["impl"] == "bucketed"]
    at_two = [r for r in mine if r["N"] == 2]
    if not at_two:
        return "reference BucketedDDP / torch DDP: N = 2 not measured, target not judged"
    ratio, gap = at_two[0]["ratio_torch"], max(r["gap"] for r in mine)
    others = ", ".join(f"N={r['N']}: {r['ratio_torch']:.2f}" for r in mine if r["N"] != 2)
    met = ratio <= TARGET_RATIO and gap <= GRAD_TOLERANCE
    return (f"reference BucketedDDP / torch DDP step time at N=2: {ratio:.2f}" + (f" ({others})" if others else "")
            + f", gradients within {gap:.1e} of torch's (relative); target <= {TARGET_RATIO} and <= "
            f"{GRAD_TOLERANCE:.0e}: " + ("met" if met else "NOT met"))


def format_table(rows: list[dict]) -> str:
    lines = [f"{'impl':>9} {'N':>2} {'cap (MiB)':>9} {'params':>9} {'step (ms)':>10} {'/ torch':>8} {'/ after':>8}"]
    for r in rows:
        lines.append(f"{r['impl']:>9} {r['N']:>2} {r['cap_mb']:>9g} {r['params']:>9} {r['step_ms']:>10.1f} "
                     f"{r['ratio_torch']:>8.2f} {r['ratio_after']:>8.2f}")
    return "\n".join(lines)


def run(worlds: list[int], cap_mb: float, quick: bool, out: Path, writer: bool) -> list[dict]:
    """Measure every world size, write ddp.csv (if `writer`) and print the table and the verdict."""
    import torch._dynamo  # noqa: F401  (torch's DDP imports it when built: once here, not in every rank)

    rows: list[dict] = []
    for world in worlds:
        print(f"DDP section: N={world}, cap {cap_mb:g} MiB", flush=True)
        per_rank = launch(measure, world, cap_mb, QUICK_WIDTH if quick else WIDTH, 3 if quick else 20, timeout=900.0)
        rows += rows_for(world, cap_mb, per_rank)
    if writer:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(rows, COLUMNS, out / "ddp.csv")
        print(format_table(rows))
        print(verdict(rows))
    return rows
