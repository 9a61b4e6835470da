"""Lab 03's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 3.0: c = h_SGD + h_DP = 2k + B + max b_r + N - 1, with h_SGD = k + B - 1 and h_DP = k + (max b_r - 1) + 2 +
    # (N - 1); values at ([314159] * 9973, 700), ([987654321, 271828, 0], 12) and ([65537] * 4096 + [1], 3).
    Derivation("03_data_parallel_math", "rounding_constant", (
        "k+b-1", "k_chain+b-1", "chain+sum(shard_sizes)-1", "sum(shard_sizes)-1", "max(shard_sizes)-1",
        "len(shard_sizes)-1", "2k+2b", "h_sgd=k+", "h_dp=k+", "2k+b+b_max", "2k+b+b_max+n-1", "b_max+n-1",
        "2*chain+sum(shard_sizes)", "max(shard_sizes)+len(shard_sizes)", "2*k_chain+",
        "rounding_constant([b],k_chain)-2"),
        ("3.13e+09", "1.98e+09", "2.69e+08")),
]
