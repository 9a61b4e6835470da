"""Lab 06's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 6.4: the mean staleness of a run, (N - 1)(1 - N / 2T), and the fixed total N (N - 1) / 2 it comes from.
    Derivation("06_async_staleness", "mean_staleness", (
        "1-n/2t", "1-n/(2t)", "1-fracn2t", "n/(2*t)", "fracn2t", "1-n/(2*len", "2*len(staleness)-n",
        "n(n-1)/2", "fracn(n-1)2", "n*(n-1)/2")),
]
