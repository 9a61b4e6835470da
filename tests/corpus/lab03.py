"""Lab 03 (data-parallel math): wrong weights in average_gradients cost exactly the tests that see them."""

from tests.corpus.common import Case, body, chain, replace

ASSIGNMENT = "03_data_parallel_math"

# The one line of the solution of exercise 3.2 that sets the weight, and the two ways to get it wrong.
WEIGHT_LINE = "    weight = local_batch_size / total  # b_r / B: this rank's share of the global batch\n"

CASES = [
    Case("sums", replace("average_gradients", WEIGHT_LINE,
                         "    weight = 1.0  # MUTANT: sums the rank gradients instead of averaging them\n"),
         loses={"test_average_gradients", "test_average_gradients_uneven", "test_average_gradients_partial"},
         says=("N = 2, rank 0, fc1.weight.grad against the whole batch's: element [",
               "got is 2 (= N) times the expected: summed, not averaged?")),
    # Also counts the backward chain once instead of once per run in exercise 3.0.
    Case("equal_weights", chain(
        replace("average_gradients", WEIGHT_LINE,
                "    weight = 1.0 / dist.get_world_size()  # MUTANT: 1/N whatever the shard sizes\n"),
        body("rounding_constant", "return chain + 2 * sum(shard_sizes) + len(shard_sizes)\n"),
    ), loses={"test_average_gradients_uneven", "test_rounding_constant"},
         says=("count each run's roundings of one term again",
               "shards [4, 3, 3] torch.float32, rank 0, fc1.weight.grad against the whole batch's: element [",
               "got is the shards' gradients weighted 1/N each: weight rank r's by b_r / B")),
]
