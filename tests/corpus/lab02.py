"""Lab 02 (ring all-reduce): a ring that does nothing loses exercise 2.1's points, and only those.

It returns at once: a wrong result (test_ring_all_reduce) and a time far below the calibrated model
(test_ring_time). A ring that is wrong but takes realistic time would lose only test_ring_all_reduce. The same
submission's pipelined ring (exercise 2.6) calls the built-in all-reduce: the ledger refuses it, and 2.6 scores zero.
"""

from tests.corpus.common import Case, body, chain

ASSIGNMENT = "02_ring_allreduce"

CASES = [
    # Also calls the built-in all-reduce in the pipelined ring: refused inside the tests' ledger.
    Case("broken_ring", chain(body("ring_all_reduce", "return\n"),
                              body("pipelined_ring_all_reduce", "dist.all_reduce(tensor)\nreturn\n")),
         loses={"test_ring_all_reduce", "test_ring_time", "test_pipelined_ring_all_reduce"},
         says=("N=3 numel=7 rank 0: element [1]: expected 6, got 1",
               "got is the input as it was: nothing was written into the tensor in place?",
               "dist.all_reduce is a built-in collective")),
]
