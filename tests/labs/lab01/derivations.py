"""Lab 01's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 1.8: the fewest bytes of all ranks together, N - 1 pieces for a rooted collective, N (N - 1) for AllGather and
    # ReduceScatter, 2 N (N - 1) for AllReduce (section 5 asks for it as its bound 3); values at (all_gather, 9973,
    # 4096), (scatter, 10^4, 123456789) and (reduce_scatter, 7919, 999999937).
    Derivation("01_collectives", "minimum_traffic", (
        "n*(n-1)", "n(n-1)", "n*(n-1)*piece_bytes", "n*(n-1)*m", "n(n-1)m", "(n-1)*piece_bytes",
        "(int(n)-1)*piece_bytes", "n(n-1)pieces", "n*(n-1)pieces", "lessthan2(n-1)m", "2(n-1)moverallranks",
        "bound3:2(n-1)m",
        # the direct algorithms' costs, which equal the rooted and all-to-all floors ("the root sends N - 1 messages,
        # (N-1)M bytes", "(N - 1) * M bytes" in a docstring, "(N-1) \frac{M}{N} bytes per rank", section 6's
        # "(N-1) m_p" and "M + (N-2) m_p", "(N-1)/N each, 2(N-1)/N together", rank 0's "N-1 times the tensor"), and
        # the same in code ("(world - 1) * m", "2 * (world - 1) / world"). (Not listed: "(N-1)/N" alone, the ring's
        # bytes per rank, which utils/collective_calls.py and lab 02 state as their own model.)
        "(n-1)m", "(n-1)/neach", "2(n-1)/ntogether", "derived2(n-1)/n", "(n-1),fracmn", "(n-1)fracmn", "fracn-1n",
        "frac2(n-1)n", "(n-2)m", "n-1timesthetensor", "n-1onrank0", "(world-1)*m", "(world-1)/world"),
        ("4.07e+11", "1.23e+12", "6.27e+16"),
        # the all-reduce's floor stated where the exercise asks for it ("all ranks together send at least 2(N-1)M
        # bytes", "2(N-1)M, the minimum of bound 3", "section 5 derived ... 2(N-1)M")
        sentences=(("atleast", "2(n-1)mbytes"), ("atleast", "2(n-1)m/n"), ("minimum", "2(n-1)m"),
                   ("bound3", "2(n-1)m"), ("derived", "2(n-1)m"))),
    # 1.9: the fewest messages, N - 1 for a rooted collective and 2 (N - 1) for the three whose every result depends
    # on every rank, and its argument, bound 3's (section 5 states bound 3 in bytes and asks why: its count of
    # 2 (N - 1) messages for one position, N - 1 distinct senders and receivers, is in the instructor cell of 1.9);
    # values at (all_reduce, 9973), (gather, 7919) and (reduce_scatter, 7333).
    Derivation("01_collectives", "minimum_messages", (
        "2*(int(n)-1)", "2n-2", "2*n-2", "2*(n-1)messages", "2(n-1)messagesintotal", "2(n-1)messagesinall",
        "2(n-1)differentmessages", "n-1distinctsenders", "n-1distinctreceivers"),
        ("1.99e+04", "7.92e+03", "1.47e+04")),
]
