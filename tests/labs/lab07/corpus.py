"""Lab 07 (ZeRO): broken submissions, each losing exactly the points of what it broke.

Points: test_memory_per_rank 2, test_shard_range 2, test_zero1_equals_ddp 4, test_zero1_state_bytes 2,
test_zero1_traffic 2, test_zero1_vs_torch 2, test_zero2 2. The tests of 7.3 and 7.4 put a stand-in in place of
shard_range, and 7.4's compares stage 2 with the submission's own stage 1, so each bug costs one exercise's points,
or one test cell's of 7.3: the fault of 7.2 shares a submission with faults of 7.3 whose cells are disjoint.
The traffic test counts calls: a right result reached with another collective loses its points only.
"""

from tests.corpus.common import Case, body, chain, replace

ASSIGNMENT = "07_zero"

# The shard's end in shard_range, the optimizer built on the master shard, the update of that shard and the
# all-gather of the updated shards: one line each in the solution.
SHARD_END = "min((rank + 1) * size, numel)"
OPTIMIZER = "self.optimizer = optimizer_cls([self.master], **optimizer_kwargs)"
UPDATE = "        self.optimizer.step()  # moves this rank's shard only, with the state of this shard only\n"
SCATTER = "        dist.reduce_scatter_single(grad, flat)  # the sum over the ranks of chunk `rank`\n"
GATHER = "            dist.all_gather_single(flat, padded)  # (N * s,): every rank's updated shard\n"
MEAN = "return grad.div_(self.world_size)"
MASTER = "owned = flat[self.owned.start:self.owned.stop]"

# 7.1's count by a tally: every element of every item on every rank that holds it, the oracle's walk. Right, and Psi N
# times as slow as the formula.
TALLY = """if stage not in (0, 1, 2, 3) or world_size < 1 or num_params < 0 or min(param_bytes, grad_bytes,
                                                                          optimizer_bytes) < 0:
    raise ValueError(f"memory_per_rank: bad arguments {num_params}, {world_size}, {stage}")
sharded_from = [(param_bytes, 3), (grad_bytes, 2), (optimizer_bytes, 1)]  # each item, the first stage sharding it
total = 0.0
for rank in range(world_size):
    for size, first in sharded_from:
        for i in range(num_params):
            if stage < first or i % world_size == rank:
                total += size
return total / world_size
"""

CASES = [
    # The shard is gathered before the optimizer moves it: every rank gets the parameters of one step before. And 7.1
    # transcribes a nearby wrong formula, stage 1 sharding the gradients instead of the optimizer state: the stages
    # still shrink one by one, but the oracle's tally disagrees, and the test says which item the count sharded.
    Case("stale_all_gather_and_stage_1_shards_the_gradients", chain(
        replace("ZeroStage1Optimizer", UPDATE, ""), replace("ZeroStage1Optimizer", GATHER, GATHER + "    " + UPDATE),
        replace("memory_per_rank", "[everything, param_bytes + grad_bytes, param_bytes, 0]",
                "[everything, param_bytes + optimizer_bytes, param_bytes, 0]")),
         loses={"test_zero1_equals_ddp", "test_zero1_vs_torch", "test_memory_per_rank"},
         says=("expected DDP's parameters (to 1e-06), got parameters 0.014 away",
               "an update lost, doubled or a step late?",
               "N = 2: expected torch's ZeroRedundancyOptimizer's parameters (to 1e-06) after every step, got gaps per "
               "rank and step [[",
               "memory_per_rank(12, 2, stage=1, bytes per parameter 2 + 4 + 12): expected 144.0 (the mean of the "
               "oracle's tally per rank, [144.0, 144.0]), got 192.0",
               "that is the count with the gradients sharded, which is not what stage 1 keeps")),
    # 7.2, each shard one element too long: neighbouring ranks both own the element at the boundary; 7.3, Adam also
    # wraps the whole model: right parameters (the all-gather overwrites them), state for every element; and the
    # reduce-scatter's sum left undivided: Adam, blind to the gradient's scale, moves the parameters by about 3e-8
    # only, but reduce_gradients is compared with the mean, and SGD with momentum moves N times too far.
    Case("shard_boundary_off_by_one_adam_state_for_the_whole_model_and_not_divided_by_n", chain(
        replace("shard_range", SHARD_END, "min((rank + 1) * size + 1, numel)"),
        replace("ZeroStage1Optimizer", OPTIMIZER,
                "self.optimizer = optimizer_cls([self.master, *self.params], **optimizer_kwargs)"),
        replace("ZeroStage1Optimizer", MEAN, "return grad  # MUTANT: the sum")),
         loses={"test_shard_range", "test_zero1_state_bytes", "test_zero1_equals_ddp"},
         says=("shard_range(10, r, 4) for r = 0..3: expected [range(0, 3), range(3, 6), range(6, 9), range(9, 10)], "
               "got [range(0, 4), range(3, 7)",
               "(neighbouring shards share an element: the end of a range is exclusive)",
               "N = 2, rank 0, reduce_gradients(): element [3]: expected 0.0477557, got 0.0955115",
               "the reduce-scatter's sum was not divided by N",
               "Adam, N = 2, rank 0: optimizer state: expected 252 bytes (Adam's state for this rank's shard alone), "
               "got 732", "state for the whole model?")),
    # The gradient all-reduced whole, of which the rank keeps its chunk (what Gloo does inside its reduce-scatter):
    # the same parameters, twice the reduce-scatter's bytes with a ring. A second optimizer over the whole model,
    # stepped beside the sharded one: right parameters (the all-gather overwrites what it moved) and the right
    # sharded state, but the object holds a full model's state besides. And the master cut with torch.chunk, right
    # while every rank owns elements, but chunk returns fewer than N pieces when P < N: the last ranks fail. And 7.1
    # by a tally (loses test_memory_per_rank through its time budget only).
    Case("all_reduce_instead_of_reduce_scatter_second_full_optimizer_chunked_master_and_tallied_memory", chain(
        replace("ZeroStage1Optimizer", SCATTER, "        dist.all_reduce(flat)\n"
                "        grad.copy_(flat.view(self.world_size, -1)[dist.get_rank()])\n"),
        replace("ZeroStage1Optimizer", OPTIMIZER,
                OPTIMIZER + "\n        self.whole = optimizer_cls(self.params, **optimizer_kwargs)  # MUTANT"),
        replace("ZeroStage1Optimizer", UPDATE, UPDATE + "        self.whole.step()\n"),
        replace("ZeroStage1Optimizer", MASTER,
                "owned = flat.chunk(self.world_size)[dist.get_rank()]"),
        body("memory_per_rank", TALLY)),
         loses={"test_zero1_traffic", "test_zero1_state_bytes", "test_zero1_equals_ddp", "test_memory_per_rank"},
         says=("times as long as a few exact operations on the same arguments (allowed: 100): a formula costs "
               "less, a tally thousands of times more",
               "test_zero1_equals_ddp (4 points) failed: a hidden check of exercise 7.3 failed",
               "Adam, N = 2, rank 0: the optimizer object holds 980 bytes of tensors besides the model's parameters "
               "and gradients, expected at most 748", "a second optimizer or a copy of the model kept?",
               "N = 2, rank 0: one step called [Call(name='all_reduce', nbytes=248, world_size=2)",
               "expected one reduce-scatter, then one all-gather"),
         # the hidden check on N = 3 that a rank fails: the instructor reads the rank's traceback
         reports=("rank 2 failed", "owned = flat.chunk(self.world_size)[dist.get_rank()]",
                  "IndexError: tuple index out of range", "in tiny_against_whole"),
         hides=("rank 2 failed", "IndexError: tuple index out of range")),
]
