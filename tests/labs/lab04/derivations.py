"""Lab 04's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 4.1: the step time of K equal buckets, T(K) = max(C / K + K alpha + beta' M, C + alpha + beta' M / K), and its
    # best integer K, in its two regimes: the K of equal terms, (C - beta' M) / alpha, with its condition, and the
    # communication-bound term's own minimum, sqrt(C / alpha), with T = beta' M + 2 sqrt(alpha C). Its values at three
    # hidden points: K* = 5518 (C = 0.37 s), T(K*) = 0.652 s (K* = 179), K* = 1085106.
    Derivation("04_bucketed_ddp", "best_bucket_count", (
        "fracc-beta'malpha", "(c-beta'm)/alpha", "(c-beta*m)/alpha", "d/alpha", "fracdalpha",
        "sqrtc/alpha", "sqrt(c/alpha)", "(c/alpha)**0.5", "(c/alpha)**(1/2)",
        "sqrtalphac", "sqrt(alpha*c)", "(alpha*c)**0.5", "fracalphacc-beta'm", "alpha*c/d",
        "c/k+kalpha", "c/k+k*alpha", "fracck+kalpha", "c+alpha+beta'm/k", "c+alpha+fracbeta'mk", "c+alpha+beta*m/k",
        "(k-1)/k", "frack-1k", "r_k+(k-k+1)c", "r_k+(k-k+1)*c", "bothtermsequal", "twoterms", "(c-bandwidth)/alpha",
        "c_sweep-beta*m_sweep", "(alpha*c_sweep)**0.5", "c_model-beta*m_model", "ownminimum", "oneofequalterms"),
        ("5.52e+03", "0.652", "1.09e+06")),
]
