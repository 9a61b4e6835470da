"""Lab 08's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 8.1-8.3, one cell: the peak bytes per rank, k Psi / N + (1 + p) U c (+ 2 U g in backward: the unit's gradient
    # and autograd's new one while it is added in); one step's bytes,
    # (N - 1) s_u (2c + r) per unit, 3 (N - 1) / N of the parameters' bytes for r = c; and the prefetch batch,
    # b* = F (N - 1)(alpha + P c / (N B)) / (2 P).
    Derivation("08_fsdp", "fsdp_costs", (
        "(1+prefetch)*unit_params", "(prefetch+1)*unit_params", "(1+p)u", "(p+1)u", "(2+p)u", "u*(c+g)",
        "2*unit_params*grad_bytes", "2ug", "2*u*g", "u*(c+2g)", "u(c+2g)",
        "(2*compute_bytes+reduce_bytes)", "(2c+r)", "2*c+r", "3(n-1)s", "3*(n-1)*s", "frac3(n-1)n", "3*(n-1)/n",
        "gather*flops_per_second/(2*unit_params)", "(n-1)(alpha+pc/(nb))f/(2p)", "fracf(n-1)(alpha+",
        "(n-1)cf/(2nb)", "frac(n-1)cf2nb", "(world_size-1)*compute_bytes*flops_per_second")),
]
