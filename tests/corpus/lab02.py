"""Lab 02 (ring all-reduce): a ring that does nothing loses exercise 2.1's points, and only those.

It returns at once: a wrong result (test_ring_all_reduce) and a time far below the calibrated model
(test_ring_time). A ring that is wrong but takes realistic time would lose only test_ring_all_reduce.
"""

from tests.corpus.common import Case, body

ASSIGNMENT = "02_ring_allreduce"

CASES = [
    Case("broken_ring", body("ring_all_reduce", "return\n"), loses={"test_ring_all_reduce", "test_ring_time"}),
]
