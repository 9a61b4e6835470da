"""Lab 03 (data-parallel math): wrong weights in average_gradients cost exactly the tests that see them."""

from tests.corpus.common import Case, body, chain, replace

ASSIGNMENT = "03_data_parallel_math"

# The one line of the solution of exercise 3.2 that sets the weight, and the two ways to get it wrong.
WEIGHT_LINE = "    weight = local_batch_size / total  # b_r / B: this rank's share of the global batch\n"

CASES = [
    # Also counts a mean shard's roundings where the largest shard's belong in exercise 3.0: right for equal shards
    # (the visible test's), wrong against the hidden test's brute-force count for uneven ones. No known mistake gives
    # every count it gives, so the feedback names none.
    Case("sums", chain(
        replace("average_gradients", WEIGHT_LINE,
                "    weight = 1.0  # MUTANT: sums the rank gradients instead of averaging them\n"),
        body("rounding_constant",
             "return 2 * chain + sum(shard_sizes) + sum(shard_sizes) // len(shard_sizes) + len(shard_sizes) - 1\n")),
         loses={"test_average_gradients", "test_average_gradients_uneven", "test_average_gradients_partial",
                "test_rounding_constant"},
         says=("N = 2, rank 0, fc1.weight.grad against the whole batch's: element [",
               "got is 2 (= N) times the expected: summed, not averaged?",
               "rounding_constant([3, 3, 2, 2], 7): expected 30 (counted by brute force over every order of the sums), "
               "got 29")),
    # Also counts the backward chain once instead of once per run in exercise 3.0.
    Case("equal_weights", chain(
        replace("average_gradients", WEIGHT_LINE,
                "    weight = 1.0 / dist.get_world_size()  # MUTANT: 1/N whatever the shard sizes\n"),
        body("rounding_constant", "return chain + 2 * sum(shard_sizes) + len(shard_sizes)\n"),
    ), loses={"test_average_gradients_uneven", "test_rounding_constant"},
         says=("rounding_constant([4, 4, 4], 7): expected 32, got 34: count each run's roundings of one term again",
               "shards [4, 3, 3] torch.float32, rank 0, fc1.weight.grad against the whole batch's: element [",
               "got is the shards' gradients weighted 1/N each: weight rank r's by b_r / B")),
]
