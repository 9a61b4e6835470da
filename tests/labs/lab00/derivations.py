"""Lab 00's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 0.4: the size at which a message gets a share s of 1/beta, s / (1 - s) * alpha / beta, and the pattern of the
    # table it fills (9 n_1/2 at 90%, 99 n_1/2 at 99%).
    Derivation("00_ranks_and_alpha_beta", "size_for_share", (
        "share/(1-share)", "s/(1-s)", "fracs1-s", "fracshare1-share", "1/(1-share)-1", "1/(1-s)-1", "9n_1/2",
        "99n_1/2", "ninetimes", "ninety-nine")),
]
