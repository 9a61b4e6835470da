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
        "asharditemcosts", "shardeditemcosts",
        # a sharded item's cost or which stage shards what, stated outside section 1 (stage 1's "from K Psi to
        # K s ~ K Psi / N bytes", "state 1/N", "about 1/N of DDP's", "the {P} / N of its shard", "sharding divides the
        # optimizer state by N", section 6's "of the owned ones for the stages"; the oracle's table SHARDED_FROM,
        # "the first stage that shards each item")
        "kpsi/n", "state1/n", "1/nofddp", "/nofitsshard", "optimizerstatebyn", "ownedonesforthestages",
        "sharded_from", "firststagethatshards"),
        ("1.28e+11", "8.78e+10", "1.17e+09"),
        # which items each stage shards and what a sharded item costs, stated beside the exercise ("Stage 1 shards
        # the optimizer state ..., stage 2 the optimizer state and the gradients, stage 3 all three. A sharded item
        # costs each rank its bytes for num_params / N parameters")
        sentences=(("stage1", "shards", "optimizerstate", "stage2", "gradients"), ("stage3", "allthree"),
                   ("sharded", "costs", "/n"), ("sharded", "costs", "1/n"),
                   # the summary's "Stage 1 shards the state, stage 2 the gradients too, stage 3 everything"; section
                   # 4's "each rank holds s ~ Psi / N gradient elements"; section 6's "DDP and stage 1 keep the full
                   # bf16 gradients, stage 2 frees them"
                   ("stage1shards", "stage2", "gradients"), ("stage3", "everything"), ("gradientelements", "psi/n"),
                   ("stage1", "fullbf16gradients", "stage2", "frees")),
        # the paper's figure 1 (Psi = 7.5e9, N = 64): 31.4, 16.6 and 1.9 GB for stages 1 to 3
        quoted=("31.4", "16.6", "1.9")),
]
