"""Lab 04 (bucketed DDP): broken submissions, each losing exactly the points of what it broke.

Points: test_bucket_timeline 2, test_best_bucket_count 2, test_ddp_buckets 2, test_ddp_equivalence 3,
test_ddp_launch_order 2, test_ddp_no_sync 2, test_ddp_overlap 2, test_ddp_torch 2, test_ddp_errors 1.
"""

from tests.corpus.common import Case, body, chain, replace

ASSIGNMENT = "04_bucketed_ddp"

# One line each in the solution: the hook's early return inside no_sync, the reverse walk over the parameters,
# the two writes of the averaged gradient, and the launch.
NO_SYNC_GUARD = "if not self._syncing:"
REVERSE = "for name, p in reversed(trainable):"
AVERAGE_NEW = "p.grad = grad / self.world"
AVERAGE_COPY = "torch.div(grad, self.world, out=p.grad)"
LAUNCH = "self._works.append(dist.all_reduce(flat, async_op=True))"
# The hook's count of the gradients still to come (after its no_sync return), each bucket's flat buffer, and the
# dtype in the parameters' signature that construction compares across ranks.
COUNTED = """        if not self._syncing:
            return  # inside no_sync: the gradient just accumulates in p.grad
        self._any_gradient = True
        self._missing[self._bucket_of[p]] -= 1
"""
FLAT = "torch.empty(sum(p.numel() for p in params) + len(params)"
DTYPE = "int(p.requires_grad), dtype_code(p.dtype))"
REGIME = "if D >= (alpha * C) ** 0.5 and D >= alpha:"
COUNTED_ALWAYS = """        self._missing[self._bucket_of[p]] -= 1  # MUTANT: counted inside no_sync too
        if not self._syncing:
            return
        self._any_gradient = True
"""

# 4.1's best bucket count found by simulating: the recurrence run bucket by bucket for K = 1, 2, ... while the step
# time falls. Right on every case, and thousands of times as slow as the closed form.
SIMULATED = """if not alpha > 0 or min(C, M, beta) < 0:
    raise ValueError(f"best_bucket_count needs alpha > 0 and C, M, beta >= 0; got {C}, {M}, {alpha}, {beta}")


def simulate(K: int) -> float:  # f_K, bucket by bucket
    finish = 0.0
    for k in range(1, K + 1):
        finish = max(k * C / K, finish) + alpha + beta * M / K
    return finish


K, T = 1, simulate(1)
while (later := simulate(K + 1)) < T:  # T(K) falls, then rises: walk while it falls
    K, T = K + 1, later
return K, T
"""

# Two faults per submission, each in its own part of BucketedDDP and losing cells the other does not touch: the
# submission loses exactly the union (two gradings instead of four; each fault's own cells are in its comment).
CASES = [
    # Ignores no_sync (loses test_ddp_no_sync): the first micro-batch's backward launches every bucket, the later
    # ones find them launched, and the step averages the first micro-batch's gradients only: K times the
    # launches, and a wrong sum. And buckets in forward (registration) order (loses test_ddp_buckets,
    # test_ddp_launch_order, test_ddp_overlap): bucket 0 holds the first layer, whose gradient comes last, so the
    # in-order launches all wait for the end of backward. And 4.1's best bucket count simulated (loses
    # test_best_bucket_count through its time budget only).
    Case("no_sync_ignored_forward_order_and_simulated_best_bucket_count",
         chain(replace("BucketedDDP", NO_SYNC_GUARD, "if False:  # MUTANT: no_sync ignored"),
               replace("BucketedDDP", REVERSE, "for name, p in trainable:"),
               body("best_bucket_count", SIMULATED)),
         loses={"test_ddp_no_sync", "test_ddp_buckets", "test_ddp_launch_order", "test_ddp_overlap",
                "test_best_bucket_count"},
         says=("times as long as a few exact operations on the same arguments (allowed: 100): a closed form costs"
               " less, a scan of K up to K* thousands of times more",
               "rank 0, 1 layer(s) per bucket: arrivals and launches: expected [('ready', 3), ('launch',), "
               "('ready', 2)",
               ", got [('ready', 3), ('ready', 2), ('ready', 1), ('ready', 0), ('launch',)",
               "(no launch before the last arrival: buckets in forward order, or launched from",
               "bucket_cap_mb=1e-06: expected buckets [['fc2.bias'], ['fc2.weight']",
               ", got [['unused'], ['fc1.weight']",
               "(in forward order? fill them in reverse registration order, as the gradients arrive)",
               "expected a step under 0.8 x (backward + all-reduces), got ",
               "test_ddp_no_sync (2 points) failed: a hidden check of exercise 4.2 failed"),
         # no_sync's hidden check: its message is the instructor's only
         reports=("rank 0: expected no all-reduce inside no_sync, got 1",),
         hides=("expected no all-reduce inside no_sync, got 1",)),
    # Sums instead of averaging (loses test_ddp_equivalence, test_ddp_no_sync, test_ddp_torch): the update is N
    # times too large. And waits for each bucket right after launching it (loses test_ddp_overlap): correct numbers,
    # launched in order during backward, but backward stalls during every all-reduce. Every bucket's flat tensor is
    # the whole model's size, zeros outside its own parameters (loses test_ddp_buckets): K times the bytes. That
    # fault lives here because it slows the all-reduces: beside the no_sync fault below, whose overlap test must
    # reach its no_sync check, it made the plain step's overlap fail first on a loaded machine (0.87 x in one CI run).
    Case("sums_waits_after_launch_and_whole_model_buckets",
         chain(replace("BucketedDDP", AVERAGE_NEW, "p.grad = grad.clone()"),
               replace("BucketedDDP", AVERAGE_COPY, "p.grad.copy_(grad)"),
               replace("BucketedDDP", LAUNCH, LAUNCH + "\n        self._works[-1].wait()"),
               replace("BucketedDDP", FLAT, "torch.empty(sum(p.numel() for p in self._bucket_of) + len(params)")),
         loses={"test_ddp_equivalence", "test_ddp_no_sync", "test_ddp_torch", "test_ddp_overlap", "test_ddp_buckets"},
         says=("N = 2: expected single-process SGD's parameters (to 1e-05), got parameters ",
               "(did you average, and broadcast?)", ".grad against torch's DDP: element [",
               "got is 2 (= N) times the expected: summed, not averaged?",
               "expected a step under 0.8 x (backward + all-reduces), got ",
               "the all-reduces do not overlap backward (waiting right after a launch? buckets in forward order?)",
               "bucket_cap_mb=1e-06: all-reduce 0 sent 62 elements, expected at most 3",
               "the whole model's gradient in every bucket?")),
    # 4.1's best bucket count always the K of equal terms, a nearby wrong formula (loses test_best_bucket_count):
    # wrong in the regime where the communication-bound term takes over while it still falls. And two faults of
    # 4.2 with right gradients.
    # The hook counts gradients inside no_sync too, suppressing only the launch (loses test_ddp_overlap): after
    # accumulation no bucket ever looks complete, and finish launches them all at the end of backward. And the
    # dtypes are not compared across ranks (loses test_ddp_errors): a bfloat16 and a float16 replica of the same
    # shapes are wrapped without a ValueError.
    Case("equal_terms_counts_inside_no_sync_and_no_dtype_check", chain(
        replace("BucketedDDP", COUNTED, COUNTED_ALWAYS), replace("BucketedDDP", DTYPE, "int(p.requires_grad))"),
        replace("best_bucket_count", REGIME, "if D >= alpha:  # MUTANT: the K of equal terms whenever >= 1")),
         loses={"test_ddp_overlap", "test_ddp_errors", "test_best_bucket_count"},
         says=("rank 0: expected a ValueError for dtypes, got none",
               "after a micro-batch under no_sync: expected a wait after the synchronising backward under 0.5 x the ",
               "did the hook count the gradients of no_sync's backward too",
               "best_bucket_count(C=210, M=1, alpha=1, beta=200): expected K* = 14 and T(K*) = 229 (the oracle's "
               "best), got (10, 231), where the oracle's T is 231")),
]
