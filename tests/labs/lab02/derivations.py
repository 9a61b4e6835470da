"""Lab 02's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 2.4: the crossover M* = (alpha / beta) N (N - 1 - L) / (N L - N + 1), the equation it solves gathered,
    # (N - 1 - L) alpha / beta = (L - (N - 1) / N) M*, and its large-N form with the numerator kept exact.
    Derivation("02_ring_allreduce", "crossover_size", (
        "n-1-l", "(n-1-l)/(n*l-n+1)", "n*l-n+1", "nl-n+1", "l-fracn-1n", "l-(n-1)/n", "fracn-1-ll-fracn-1n",
        "fracn-1-log_2nlog_2n-1", "(p-1-math.log2(p))")),
]
