"""Lab 02 (ring all-reduce): a ring that does nothing loses exercise 2.1's points, and only those.

It returns at once: a wrong result (test_ring_all_reduce) and a time far below the calibrated model
(test_ring_time). A ring that is wrong but takes realistic time would lose only test_ring_all_reduce. The same
submission's pipelined ring (exercise 2.6) calls the built-in all-reduce: the ledger refuses it, and 2.6 scores zero;
and its crossover (exercise 2.4) is a bisection on the cost formulas, a root found numerically where the exercise
asks for the equation solved: the test's formulas raise when it calls them.
"""

from tests.corpus.common import Case, body, chain

BISECTION = """if N <= 3 or alpha == 0:
    return 0.0
low, high = 0.0, 1e15  # bytes: the tree ahead at low, the ring at high
for _ in range(200):
    middle = (low + high) / 2
    if tree_time(middle, N, alpha, beta) < ring_time(middle, N, alpha, beta):
        low = middle
    else:
        high = middle
return low
"""

ASSIGNMENT = "02_ring_allreduce"

CASES = [
    # Also calls the built-in all-reduce in the pipelined ring (refused inside the tests' ledger), and finds the
    # crossover by bisection.
    Case("broken_ring_crossover_by_bisection", chain(
        body("ring_all_reduce", "return\n"), body("pipelined_ring_all_reduce", "dist.all_reduce(tensor)\nreturn\n"),
        body("crossover_size", BISECTION)),
         loses={"test_ring_all_reduce", "test_ring_time", "test_pipelined_ring_all_reduce", "test_crossover_size"},
         says=("N=3 numel=7 rank 0: element [1]: expected 6, got 1",
               "got is the input as it was: nothing was written into the tensor in place?",
               "dist.all_reduce is a built-in collective",
               "crossover_size called ring_time or tree_time: exercise 2.4 asks for the equation of section 5")),
]
