"""Lab 03 (data-parallel math): wrong weights in average_gradients cost exactly the tests that see them.

The derivation 3.0 loses its point twice: to a nearby but wrong count (the oracle's brute force tells on small
batches), and to the right count found by walking each sum term by term: correct, but linear in the batch, a hundred
times as slow as one pass over the shard sizes where the test allows 30.
"""

from tests.corpus.common import Case, body, chain, replace

ASSIGNMENT = "03_data_parallel_math"

# The one line of the solution of exercise 3.2 that sets the weight, and the two ways to get it wrong.
WEIGHT_LINE = "    weight = local_batch_size / total  # b_r / B: this rank's share of the global batch\n"

# c by walking the sums term by term: correct, and linear in the batch.
WALKED_SUMS = """if not shard_sizes or min(shard_sizes) < 0 or sum(shard_sizes) < 1 or chain < 0:
    raise ValueError(f"need shard sizes >= 0 with a positive sum and chain >= 0, got {shard_sizes}, {chain}")
single = parallel = chain  # the term's backward chain, in each run
for _term in range(sum(shard_sizes) - 1):  # a running sum over the batch that starts with the term
    single += 1
for _term in range(max(shard_sizes) - 1):  # its shard's running sum, on the largest shard
    parallel += 1
parallel += 2  # the weight b_r / B, rounded when computed and when applied
for _rank in range(len(shard_sizes) - 1):  # the ring's running sum over the ranks
    parallel += 1
return single + parallel
"""

CASES = [
    # Also finds exercise 3.0's c by walking the sums term by term, not derived.
    Case("sums_walked_sums", chain(
        replace("average_gradients", WEIGHT_LINE,
                "    weight = 1.0  # MUTANT: sums the rank gradients instead of averaging them\n"),
        body("rounding_constant", WALKED_SUMS)),
         loses={"test_average_gradients", "test_average_gradients_uneven", "test_average_gradients_partial",
                "test_rounding_constant"},
         says=("N = 2, rank 0, fc1.weight.grad against the whole batch's: element [",
               "got is 2 (= N) times the expected: summed, not averaged?",
               "rounding_constant([10**6] * 10 + [i], 7) for i from 0 to 699 took",
               "times as long as a few exact operations on the same arguments (allowed: 100)")),
    # Also counts the backward chain once instead of once per run in exercise 3.0.
    Case("equal_weights", chain(
        replace("average_gradients", WEIGHT_LINE,
                "    weight = 1.0 / dist.get_world_size()  # MUTANT: 1/N whatever the shard sizes\n"),
        body("rounding_constant", "return chain + 2 * sum(shard_sizes) + len(shard_sizes)\n"),
    ), loses={"test_average_gradients_uneven", "test_rounding_constant"},
         says=("rounding_constant([12], 7): expected 38 (the oracle's h_SGD + h_DP, an int), got 32",
               "shards [4, 3, 3] torch.float32, rank 0, fc1.weight.grad against the whole batch's: element [",
               "got is the shards' gradients weighted 1/N each: weight rank r's by b_r / B")),
]
