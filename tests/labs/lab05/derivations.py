"""Lab 05's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 5.0: v_inf = eta sigma^2 / (B (2 - eta - 2 eta / B)), from v' = (1 - eta)^2 v + eta^2 (2 v + sigma^2) / B, stable
    # for eta < 2B / (B + 2).
    Derivation("05_large_batch", "stationary_second_moment", (
        "(1-eta)^2", "(1-eta)**2", "2-eta-2eta/b", "2-eta-2*eta/b", "fracetasigma^2b(2-eta", "eta/(b*(2-eta",
        "2eta^2/b", "2*eta**2/b", "2v_t+sigma^2", "2b/(b+2)", "frac2bb+2")),
]
