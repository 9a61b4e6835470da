"""Lab 10 (gradient compression): broken submissions, each losing exactly the points of what it broke.

Points: test_powersgd_bytes 2, test_rank_that_stops_paying 1, test_break_even_bandwidth 2, test_top_k 1,
test_random_k 1, test_random_k_variance 1, test_error_feedback 2, test_residual_bound 1, test_cast_hook 2,
test_orthogonalize 1, test_powersgd_hook 4, test_sparse_hook 2. The tests of ErrorFeedback use a compressor that is
no exercise's (visible) and stand-ins for top-k and random-k (hidden), powersgd_hook's a stand-in orthogonalize (torch's
Gram-Schmidt), sparse_hook's the identity for top-k, random-k and ErrorFeedback at k = d (visible) and stand-ins for
them at k < d (hidden), so each fault costs its own cell only, and faults whose cells are disjoint share one of the two
submissions. No visible test writes out an exercise's answer (tests/labs/lab10/test_lab10.py).
"""

from tests.corpus.common import Case, body, chain, replace

ASSIGNMENT = "10_gradient_compression"

RING_FACTOR = "return 2 * (world_size - 1) / world_size * 4 * (m + n) * columns"
CARRIED = "corrected = grad if self.residual is None else grad + self.residual  # a new tensor: grad is left alone"
RESIDUAL = "self.residual = corrected - sent  # what this step dropped, carried into the next"
BY_MAGNITUDE = "kept = flat.abs().topk(k).indices"
RESCALED = "out[kept] = flat[kept] * (flat.numel() / k)"
NORMALIZE = "        column /= torch.norm(column, dim=1, keepdim=True)\n"
ORTHOGONAL_P = ("        for p in ps:\n"
                "            orthogonalize(p)  # the summed P, orthonormal: the same on every rank\n")
FRESH_Q = "fresh = not state.warm_start or index not in state.p_memory_dict"
RETURN_LATER = "    return future.then(decompress)\n"
VARIANCE = "return x_norm_sq * (d - k) / k"
FIXED_POINT = "return grad_bound * shrink / (1 - shrink)"
COMPRESSED = "    sent = compress(buffer)\n"
SHARED_DRAW = "kept = torch.randperm(d, generator=replay, device=replay.device)[:k]"

# 10.3 by simulation: the oracle's ring step by step and its bisection, rewritten under other names. Right on every
# small case, and N^2 times as slow as the formula per bisection step.
SIMULATED_BREAK_EVEN = """if min(m, n, rank, world_size) < 1 or alpha < 0 or seconds_per_element < 0:
    raise ValueError("break_even_bandwidth: bad arguments")


def ring(nbytes, bandwidth):
    clocks = [0.0] * world_size
    for _ in range(2 * (world_size - 1)):
        arrived = [clock + alpha + nbytes / world_size / bandwidth for clock in clocks]
        clocks = [max(arrived[i], arrived[i - 1]) for i in range(world_size)]
    return max(clocks)


def pays(bandwidth):
    columns = min(m, n, rank)
    compressed = seconds_per_element * m * n + ring(4 * m * columns, bandwidth) + ring(4 * n * columns, bandwidth)
    return compressed < ring(4 * m * n, bandwidth)


low, high = -12.0, 30.0
if not pays(10**low):
    return 0.0
if pays(10**high):
    return math.inf
for _ in range(200):
    middle = (low + high) / 2
    low, high = (middle, high) if pays(10**middle) else (low, middle)
return 10**low
"""

CASES = [
    # ErrorFeedback without the feedback: it sends compressor(grad) and keeps nothing. top_k by value, not magnitude:
    # large negative entries are dropped. PowerSGD without orthogonalizing the summed P: P Q^T is scaled wrong. Gram-
    # Schmidt without the normalization. 10.1's count without the ring's factor of two (one pass, not two). 10.9's
    # E|C(x)|^2 for E|C(x) - x|^2. A sparse hook that all-reduces the whole compressed bucket (zeros and all). A cast
    # hook that calls torch's own (its results, bit for bit, but not written by the student).
    Case("no_error_feedback_top_k_by_value_p_not_orthogonal_no_normalization_one_ring_pass_second_moment_dense_sparse_"
         "torch_cast", chain(
        replace("ErrorFeedback", CARRIED, "corrected = grad  # MUTANT: no error feedback"),
        replace("ErrorFeedback", RESIDUAL, "self.residual = torch.zeros_like(grad)"),
        replace("top_k", BY_MAGNITUDE, "kept = flat.topk(k).indices"),
        replace("powersgd_hook", ORTHOGONAL_P, ""),
        replace("orthogonalize", NORMALIZE, ""),
        replace("powersgd_bytes", RING_FACTOR, "return (world_size - 1) / world_size * 4 * (m + n) * columns"),
        replace("random_k_variance", VARIANCE, "return x_norm_sq * d / k  # MUTANT: E|C(x)|^2"),
        replace("sparse_hook", COMPRESSED, COMPRESSED + "    buffer.copy_(sent).div_(world)  # MUTANT: all d elements\n"
                "    return dist.all_reduce(buffer, async_op=True).get_future().then(lambda done: done.value()[0])\n"),
        body("cast_hook", "return default_hooks._compress_hook(state, None, bucket)  # MUTANT: torch's\n")),
         loses={"test_error_feedback", "test_top_k", "test_powersgd_hook", "test_orthogonalize", "test_powersgd_bytes",
                "test_random_k_variance", "test_sparse_hook", "test_cast_hook"},
         says=("nothing is carried (no error feedback?)", "(kept the largest values, not the largest magnitudes?)",
               "parameters differ from torch's powerSGD_hook on torch's DDP by", "the columns are not orthonormal",
               "powersgd_bytes(8, 6, 1, 2): expected 56.0 (the oracle's mean), got 28.0", "(the expected |C(x)|^2?)",
               "expected [Call(name='all_gather_into_tensor', nbytes=6464, world_size=2)",
               "Exercise 10.6 (cast_hook) called torch's _compress_hook: the exercise asks for it written by you")),
    # The residual is what this step's gradient lost, not what the corrected one lost: the old residual's unsent part
    # is dropped. random_k not rescaled by d / k: biased. Q drawn afresh every step despite warm start. A cast hook
    # that copies the cast tensor back before its all-reduce has completed. 10.2's floor for the ceiling; 10.3 by
    # simulation (loses its points through the time budget only). top_k keeping the smallest magnitudes. 10.10's
    # bound on |g + e| for the bound on |e|. A sparse hook whose random-k indices are each rank's own. orthogonalize
    # by torch's Gram-Schmidt (its results, but not written by the student).
    Case("residual_not_carried_random_k_unscaled_q_redrawn_hook_returns_early_floor_simulated_break_even_smallest_"
         "bound_off_indices_unshared_torch_gram_schmidt", chain(
        replace("ErrorFeedback", RESIDUAL, "self.residual = grad - sent  # MUTANT: the old residual is lost"),
        replace("random_k", RESCALED, "out[kept] = flat[kept]"),
        replace("powersgd_hook", FRESH_Q, "fresh = True  # MUTANT: a new Q every step"),
        replace("cast_hook", RETURN_LATER, "    buffer.copy_(compressed)  # MUTANT: before the all-reduce is done\n"
                "    early = torch.futures.Future()\n    early.set_result(buffer)\n    return early\n"),
        replace("rank_that_stops_paying", "return -(-m * n // (m + n))", "return m * n // (m + n)"),
        body("break_even_bandwidth", SIMULATED_BREAK_EVEN),
        replace("top_k", BY_MAGNITUDE, "kept = flat.abs().topk(k, largest=False).indices  # MUTANT: the smallest"),
        replace("residual_bound", FIXED_POINT, "return grad_bound / (1 - shrink)  # MUTANT: bounds |g + e|"),
        replace("sparse_hook", SHARED_DRAW, "kept = torch.randperm(d, generator=torch.Generator().manual_seed("
                "dist.get_rank()))[:k]  # MUTANT"),
        body("orthogonalize", "_orthogonalize_gram_schmidt(matrices, 0)  # MUTANT: torch's\nreturn\n")),
         loses={"test_error_feedback", "test_random_k", "test_powersgd_hook", "test_cast_hook",
                "test_rank_that_stops_paying", "test_break_even_bandwidth", "test_top_k", "test_residual_bound",
                "test_sparse_hook", "test_orthogonalize"},
         says=("not carried across steps?", "(not scaled by d / k: biased)",
               "parameters differ from torch's powerSGD_hook on torch's DDP by",
               "copy back only once the all-reduce is complete",
               "rank_that_stops_paying(8, 6): expected 4 (the search's), got 3",
               "as a few exact operations on the same arguments (allowed: 100)",
               "(kept the smallest magnitudes, not the largest?)", "(the recursion's limit), got",
               "parameters differ from plain averaging (every entry kept) by",
               "Exercise 10.7 (orthogonalize) called torch's _orthogonalize_gram_schmidt: the exercise asks for it "
               "written by you")),
]
