"""Lab 08's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 8.1: the peak bytes per rank, k Psi / N + (1 + p) U c, and in backward 2 U g more (the unit's gradient and
    # autograd's new one while it is added in); values at (7e10, 1024, 1e8, p = 2, backward), (1e11, 1e4, 3e9, p = 1,
    # forward, 12 + 4 + 4) and (123456789012, 4096, 987654321, p = 3, backward, 16 + 2 + 4).
    Derivation("08_fsdp", "peak_bytes", (
        "(1+prefetch)*unit_params", "(prefetch+1)*unit_params", "(1+p)u", "(p+1)u", "(2+p)u", "u*(c+g)",
        "2*unit_params*grad_bytes", "2ug", "2*u*g", "u*(c+2g)", "u(c+2g)", "kpsi/n+(1+p)", "kpsi/n+(p+1)",
        "theunitcomputingandthep", "i:i+1+prefetch", "i:i+1+p]", "i-prefetch):i+1", "plustwounits",
        "eachsuchnewtensoraslargeastheunit", "thisunit'sandthenext", "thatunit'sandthe`prefetch`next"),
        ("2.09e+09", "2.41e+10", "1.63e+10"),
        # the resident units or gradients counted in words ("about 1/N of DDP plus two units", "that unit's and the
        # prefetch next ones'", "count each such new tensor as large as the unit")
        sentences=(("1/nofddp", "twounits"), ("unit's", "nextones'"), ("newtensor", "aslargeastheunit"),
                   ("gradient", "twiceitsunit")),
        # section 1's example, 7e9 parameters in 32 units, p = 1: 14.9 and 15.8 GB at N = 8 (N = 64's 2.6 and 3.5
        # GB are left out: "torch >= 2.6" and a figure's size hold them too)
        quoted=("14.9", "15.8")),
    # 8.2: one step's bytes, (N - 1) s_u (2c + r) per unit, 3 (N - 1) / N of the parameters' bytes for r = c, 1.5
    # times DDP's; values at 4003 units on 1e4 ranks, 2000 units of 987654321 on 4096 (r = 4) and 4321 units on 7919.
    Derivation("08_fsdp", "step_traffic", (
        "(2*compute_bytes+reduce_bytes)", "(2c+r)", "2*c+r", "3(n-1)s", "3*(n-1)*s", "frac3(n-1)n", "3*(n-1)/n",
        "1.5timesddp", "twoall-gathersandareduce-scatterperunit", "sends(n-1),s", "sends(n-1)s", "(n-1)*s_u",
        "(n-1)s_u",
        # the count for 4 units, in the overlap test's comment ("6 of 12 collectives")
        "of12collectives"),
        ("1.8e+12", "1.58e+13", "5.18e+12"),
        # the count of one unit's collectives, in any order ("per unit, two all-gathers and one reduce-scatter")
        sentences=(("perunit", "twoall-gathers", "onereduce-scatter"),
                   ("eachunit", "twoall-gathers", "onereduce-scatter"),
                   ("perunit", "twoall-gathers", "areduce-scatter")),
        # section 1's example, 7e9 parameters in 32 units: 36.8 and 41.3 GB a step at N = 8 and 64
        quoted=("36.8", "41.3")),
    # 8.3: the prefetch batch b* = F (N - 1)(alpha + P c / (N B)) / (2 P), where a unit's forward 2 P b / F lasts as
    # long as the next unit's gather; values at (5e8, 512, ...), (1e11, 1e4, ...) and (333333333, 96, ...).
    Derivation("08_fsdp", "prefetch_batch", (
        "gather*flops_per_second/(2*unit_params)", "(n-1)(alpha+pc/(nb))f/(2p)", "fracf(n-1)(alpha+",
        "(n-1)cf/(2nb)", "frac(n-1)cf2nb", "(world_size-1)*compute_bytes*flops_per_second", "2pb/f=", "fracgf2p",
        "gf/(2p)", "2pb/f=g", "wheretheyareequal", "(n_b-1)*(alpha_b+", "2floating-pointoperationsperparameter",
        "2flopsperparameter", "twoflopsperparameter", "onechunkofp/nelements"),
        ("3.71e+03", "4.3e+04", "2.41e+04"),
        # the gather's time as steps times a step's cost, in any order ("N - 1 steps; in each, one chunk of P/N")
        sentences=(("n-1steps", "onechunk"), ("n-1ringsteps", "onechunk")),
        # section 1's example, an H100 with NVLink 4 at N = 8 and InfiniBand NDR at N = 64: about 780 and 7900 tokens
        quoted=("780", "7.9e+03")),
]
