"""Lab 10's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 10.1: a rank-r PowerSGD all-reduce of an m x n float32 gradient sends 2 (N-1)/N * 4 (m + n) min(m, n, r) bytes
    # per rank (P and Q on a ring). Its values at three hidden points: 1.70e+06 bytes (40961 x 12289, r = 4,
    # N = 8192), 5.12e+08 (1e6 x 999983, 32, 1e4), 5.69e+06 (7777 x 3333, 64, 4096).
    Derivation("10_gradient_compression", "powersgd_bytes", (
        "(m+n)*columns", "(m+n)*r", "(m+n)r", "r(m+n)", "r*(m+n)", "4(m+n)", "4*(m+n)", "8(m+n)", "(m+n)*rank",
        "(m+n)*min(", "(m+n)min("),
        ("1.7e+06", "5.12e+08", "5.69e+06")),
    # 10.2: PowerSGD stops paying at r = ceil(m n / (m + n)) (the ring's factor cancels). Hidden points: 9831
    # (12288 x 49152), 437500000 (1e9 x 777777777), 3856 (4097 x 65536).
    Derivation("10_gradient_compression", "rank_that_stops_paying", (
        "m*n//(m+n)", "mn/(m+n)", "m*n/(m+n)", "fracmnm+n", "fracm*nm+n", "(m*n)/(m+n)", "mn//(m+n)"),
        ("9.83e+03", "4.38e+08", "3.86e+03")),
    # 10.3: B* = 2 (N-1)/N * 4 (m n - (m + n) r') / (c m n + 2 (N-1) alpha), 0 when (m + n) r' >= m n, inf when the
    # denominator is 0. Hidden points: 5.79e+10 bytes/s (65536 x 16384, r = 4, N = 4096, alpha 5e-6, c 1e-10),
    # 2.63e+09 (1e5 x 1e5, 32, 1e4, 2e-5, 3e-9), 2.16e+10 (12288 x 49152, 8, 512, 1e-4, 2e-10).
    Derivation("10_gradient_compression", "break_even_bandwidth", (
        "m*n-(m+n)*", "mn-(m+n)r", "mn-r(m+n)", "m*n-r*(m+n)", "seconds_per_element*m*n+2*(world_size-1)*alpha",
        "cmn+2(n-1)alpha", "c*m*n+2*(n-1)*alpha", "cmn+2alpha(n-1)"),
        ("5.79e+10", "2.63e+09", "2.16e+10")),
    # 10.9: random-k (k of d, scaled by d / k) adds E|C(x) - x|^2 = (d/k - 1) |x|^2. Hidden points: 2.14e+07
    # (|x|^2 = 0.75, d = 123456789012, k = 4321), 3.21e+09 (2.5, 1e15, 777777), 2.57e+11 (13, 98765432109, 5).
    Derivation("10_gradient_compression", "random_k_variance", (
        "d/k-1", "(d-k)/k", "fracdk-1", "fracd-kk", "n/k-1", "(n-k)/k", "fracnk-1", "fracn-kk", "*d/k-x_norm_sq"),
        ("2.14e+07", "3.21e+09", "2.57e+11")),
    # 10.10: error feedback's residual under a delta-contractive compressor and |g| <= G is at most
    # G sqrt(1-delta) / (1 - sqrt(1-delta)), the limit of r_{t+1} = sqrt(1-delta) (G + r_t). Hidden points: 5.13e+07
    # (delta 3e-8, G 0.77), 1.04e+08 (2.5e-7, 13), 8.5e+05 (4e-6, 1.7).
    Derivation("10_gradient_compression", "residual_bound", (
        "/(1-shrink)", "sqrt(1-delta)/(1-sqrt(1-delta))", "fracsqrt1-delta1-sqrt1-delta", "1-sqrt(1-delta)",
        "1-sqrt1-delta", "1-math.sqrt(1-delta)", "q/(1-q)", "fracq1-q", "/delta*(1+sqrt", "2sqrt1-deltadelta"),
        ("5.13e+07", "1.04e+08", "8.5e+05")),
]
