"""Lab 02 (ring all-reduce): a ring that does nothing loses exercise 2.1's points, and only those.

It returns at once: a wrong result (test_ring_all_reduce) and a time far below the calibrated model
(test_ring_time). A ring that is wrong but takes realistic time would lose only test_ring_all_reduce. The same
submission's pipelined ring (exercise 2.6) calls the built-in all-reduce: the ledger refuses it, and 2.6 scores zero;
and its crossover (exercise 2.4) is a bisection on the two cost formulas written out by hand, a root found
numerically where the exercise asks for the equation solved: it never calls ring_time or tree_time (which the test
makes raise), and its two hundred halvings fit the time budget (a few exact operations: a bisection costs about as
much as a closed form, and no time budget tells them apart), but its fixed range of sizes misses M* when alpha / beta
is 1e-190 bytes (the hidden tests).
"""

from tests.corpus.common import Case, body, chain

BISECTION = """if N <= 3 or alpha == 0:
    return 0.0
L = (int(N) - 1).bit_length()  # ceil(log2 N)
low, high = 0.0, 1e15  # bytes: the tree ahead at low, the ring at high
for _ in range(200):
    middle = (low + high) / 2
    if 2 * L * (alpha + beta * middle) < 2 * (N - 1) * (alpha + beta * middle / N):  # tree_time < ring_time
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
         says=("N=3 (7,) torch.int64 rank 0: element [1]: expected 6, got 1",
               "got is the input as it was: nothing was written into the tensor in place?",
               "faster than the model allows: does the ring send and receive all its 2(N-1) messages?",
               "dist.all_reduce is a built-in collective",
               "a search over a fixed range of sizes misses M*; the solved equation does not")),
]
