"""Lab 07's derivation exercises: tests/test_derivations.py checks that the student edition prints none of them."""

from tests.labs import Derivation

DERIVATIONS: list[Derivation] = [
    # 7.1: the bytes per rank of stages 1, 2 and 3, (p + g) Psi + K Psi / N, p Psi + (g + K) Psi / N and
    # (p + g + K) Psi / N, their mixed-precision values 4 Psi + 12 Psi / N, 2 Psi + 14 Psi / N and 16 Psi / N, and
    # section 6's table of the same counts with n_r owned elements. Its values at three hidden points: 1.28e+11 bytes
    # (Psi = 3.1e10, N = 96, stage 1), 8.78e+10 (4.3e10, 384, stage 2, 2 + 4 + 12), 1.17e+09 (7.3e10, 1000, stage 3).
    Derivation("07_zero", "memory_per_rank", (
        "(p+g)psi+kpsi/n", "ppsi+(g+k)psi/n", "(p+g)*psi+k*psi/n", "p*psi+(g+k)*psi/n", "4psi+12psi/n",
        "2psi+14psi/n", "4*psi+12*psi/n", "2*psi+14*psi/n", "tendto4psiand2psi", "16psi/n", "frac16psin",
        "16*psi/n", "(p+g+k)psi/n", "12psi/n", "14psi/n", "4n_rmore", "2n_rmore", "12*owned",
        "dividesallofitbyn", "(param_bytes+grad_bytes)*", "optimizer_bytes/world_size", "stagestageshards",
        "asharditemcosts", "shardeditemcosts"),
        ("1.28e+11", "8.78e+10", "1.17e+09"),
        # which items each stage shards and what a sharded item costs, stated beside the exercise ("Stage 1 shards
        # the optimizer state ..., stage 2 the optimizer state and the gradients, stage 3 all three. A sharded item
        # costs each rank its bytes for num_params / N parameters")
        sentences=(("stage1", "shards", "optimizerstate", "stage2", "gradients"), ("stage3", "allthree"),
                   ("sharded", "costs", "/n"), ("sharded", "costs", "1/n"))),
]
