"""Lab 08 (FSDP): broken submissions, each losing exactly the points of what it broke.

Points: test_peak_bytes 2, test_step_traffic 2, test_prefetch_batch 2, test_fsdp_equals_one_process_and_ddp 4,
test_fsdp_traffic 2, test_fsdp_memory 2, test_fsdp_overlap 2, test_fsdp_bf16 2, test_fsdp_vs_fully_shard 2,
test_fsdp_bad_input 1. The three derivations are independent functions, each with a nearby wrong formula (which
the comparison with the oracle finds) and an answer walked or searched with the oracle kept under another name
(which only the time budget finds); each of 8.4's test cells checks one property of FullyShardedDP, so faults whose
cells are disjoint share a submission. The memory test sees every gathered
storage still alive, wherever it is held (autograd's saved tensors too), so a unit kept whole costs its points
whether the wrapper or autograd keeps it; its hidden tests bound backward's peak (utils.memory.NewMemory), which a
kept gradient exceeds. The overlap test compares the communication a step exposes with and without prefetch: a fault
that removes gathers changes both alike, and only a gather waited for at once loses it. The bad-input test's cases
of one rank alone hang a rank that raised first: the launch's 10 s timeout ends them, so one such case is enough.
"""

from tests.corpus.common import Case, append, body, chain, replace

ASSIGNMENT = "08_fsdp"

FSDP = "FullyShardedDP"
AFTER_FORWARD = ("    def _after_forward(self, i: int, unit: nn.Module, args: tuple, output) -> None:\n"
                 "        self.free(i)\n")
BEFORE_BACKWARD = "        self.ready(i, list(range(i - 1, -1, -1)))\n"
LAUNCH = "        self.pending[i] = dist.all_gather_single(self.full[i].data, shard, async_op=True)"
FREE = "        self.full[i].untyped_storage().resize_(0)\n"
MEAN = "        grad = grad.float().div_(self.world)\n"
PREFETCH = ("            if self.pending[j] is None and not self.gathered(j):\n"
            "                self.gather(j)\n")
EMPTY_CHECK = ("            if not params[i]:\n"
               "                problems.append(f\"unit {i} ({type(unit).__name__}) has no parameters\")\n")
MASTER = "shards.append(nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].clone()))"
AGREE = "        verdicts = [None] * self.world\n"
SHAPES = "        shapes = [[tuple(p.shape) for p, _ in unit.values()] for unit in params]\n"
DTYPES = "        dtypes = [[str(p.dtype) for p, _ in unit.values()] for unit in params]\n"
ACCUMULATE = "        shard.grad = grad if shard.grad is None else shard.grad + grad\n"
FROZEN = ("                if not p.requires_grad:\n"
          "                    problems.append(f\"{names[id(p)][0]} does not require grad (frozen parameters are not "
          "supported)\")\n")
TWO_UNITS = ("                if home.setdefault(id(p), i) != i:\n"
             "                    problems.append(f\"unit {i} shares {names[id(p)][-1]} with unit {home[id(p)]}\")\n")
PLACES = "params[i].setdefault(id(p), (p, []))[1].append((owner, name))"
REDUCE = "        dist.reduce_scatter_single(grad, flat)\n"
ROUNDED = "        dtype = self.compute_dtype or self.layouts[i][0][2]\n"
GRADIENT_TERM = "2 * unit_params * grad_bytes"
# 8.1 and 8.2 answered by walking the step with the oracle (kept under another name, which the tests cannot refuse):
# the oracle's answers, too slow for the time budget
WALKED_PEAK = ("full, rest = divmod(num_params, unit_params) if unit_params else (0, num_params)  # MUTANT: walked\n"
               "units = [rest] * (rest > 0) + [unit_params] * full\n"
               "return _walk(units, world_size, prefetch, shard_bytes, compute_bytes, grad_bytes)[phase]\n")
WALKED_TRAFFIC = ("return int(_walk(unit_numels, world_size, 0, compute_bytes=compute_bytes, "
                  "reduce_bytes=reduce_bytes)[\"sent\"])  # MUTANT: walked\n")

CASES = [
    # 8.4: each unit gathered once per step, kept from its forward to the end of its backward (no free after
    # forward, so backward finds it gathered): the right parameters, one all-gather per unit instead of two, and
    # every unit in memory at once. Each gather waited for right after its launch: no overlap. And no check for a
    # unit without parameters: torch.cat of nothing raises a ValueError too, but one that names no unit.
    # fully_shard makes two all-gathers per unit: its test compares the calls, and loses with the traffic test.
    # 8.3: the gather's latency forgotten (alpha dropped).
    Case("gathered_once_per_step_waited_at_once_no_empty_unit_check_and_no_latency", chain(
        replace(FSDP, AFTER_FORWARD, AFTER_FORWARD.replace("self.free(i)", "return  # MUTANT: kept for backward")),
        replace(FSDP, LAUNCH, LAUNCH + "; self.pending[i].wait()"),  # MUTANT: waited for at once
        replace(FSDP, EMPTY_CHECK, ""),
        replace("prefetch_batch", "(alpha + unit_params * compute_bytes", "(0 * alpha + unit_params * compute_bytes")),
         loses={"test_fsdp_traffic", "test_fsdp_memory", "test_fsdp_overlap", "test_fsdp_bad_input",
                "test_fsdp_vs_fully_shard", "test_prefetch_batch"},
         says=("prefetch_batch(1000, 2, 400000000000000.0, 450000000000.0, 2, 5e-06): expected 1000444.",
               "(searched_prefetch_batch), got 444.44",
               "6 all-gathers for 3 units; got 3 all-gathers", "gathered once per step, or not again before backward?",
               "bytes of gathered parameters in memory, expected ", "a unit not freed after use",
               "expected under 0.75 (0.5 predicted)", "waited for right after its launch?",
               "the calls of forward and backward: expected fully_shard's [",
               "does not name the unit without parameters, unit 1 (nn.Tanh): torch.cat(): expected a non-empty list")),
    # 8.4: "freed" by dropping the reference (autograd keeps the storage alive) and no gather before backward: the
    # stale tensor still holds the right values, so the parameters are right, but it stays in memory and a step
    # makes one all-gather per unit (fully_shard's calls too). The masters kept in bf16 when computing in bf16, their
    # gradients too. 8.2: no padding counted (floor(P_u / N) elements per shard, not the ceiling). And the ranks
    # compare each parameter's number of elements, not its shape: Embedding(6, 4) on one rank and Embedding(4, 6) on
    # the others pass (hidden tests only).
    Case("stale_tensor_in_backward_bf16_master_unpadded_traffic_and_element_counts_compared", chain(
        replace(FSDP, FREE, "        self.full[i] = None  # MUTANT: autograd still holds it\n"),
        replace(FSDP, BEFORE_BACKWARD, "        pass  # MUTANT: the forward's tensor is reused\n"),
        replace(FSDP, MASTER, "shards.append(nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].to("
                "compute_dtype or torch.float32)))"),
        replace(FSDP, MEAN, "        grad = grad.to(self.shards[i].dtype).div_(self.world)  # MUTANT: its dtype\n"),
        replace("step_traffic", "shards = [-(-n // world_size) for n in unit_numels]",
                "shards = [n // world_size for n in unit_numels]"),
        replace(FSDP, SHAPES, "        shapes = [[(p.numel(),) for p, _ in unit.values()] for unit in params]  # MUTANT"
                "\n")),
         loses={"test_fsdp_traffic", "test_fsdp_memory", "test_fsdp_bf16", "test_fsdp_vs_fully_shard",
                "test_step_traffic", "test_fsdp_bad_input"},
         says=("step_traffic([7], 2, 2, None): expected 24 (the bytes walked_step sent, an int), got 18",
               "6 all-gathers for 3 units; got 3 all-gathers", "not again before backward?",
               "the masters (fsdp.parameters()) are {torch.", "}: expected float32 only",
               "test_fsdp_bad_input (1 points) failed: a hidden check of exercise 8.4 failed"),
         reports=("Embedding(6, 4) on rank 1: no error",), hides=("Embedding(6, 4) on rank 1: no error",)),
    # 8.4: the reduce-scatter's sum not divided by N (SGD moves N times too far, against one process, DDP and
    # fully_shard alike; AdamW, blind to the gradient's scale, would move only about 1e-6 off: the torch test uses
    # SGD with momentum); and a prefetched unit "freed" by dropping the reference:
    # the views of it that the unit and autograd hold keep it in memory (backward gathers it again, into a tensor
    # nobody reads: the traffic and the gradients stay right). 8.1: the full gradient of backward forgotten.
    # 8.4: a frozen parameter not refused: its view is made to require grad, and it is trained. 8.3 answered by the
    # oracle's search under another name.
    Case("not_averaged_prefetch_never_freed_backward_without_its_gradient_frozen_trained_and_searched", chain(
        replace(FSDP, MEAN, "        grad = grad.float()  # MUTANT: the sum\n"),
        replace(FSDP, PREFETCH, PREFETCH + "                self.kept = getattr(self, 'kept', set()) | {j}\n"),
        replace(FSDP, FREE, "        if i in getattr(self, 'kept', set()):  # MUTANT: a prefetched unit's memory kept\n"
                "            self.full[i] = None\n"
                "            return\n" + FREE),
        replace("peak_bytes", '(gradients if phase == "backward" else 0)', "0"),
        replace(FSDP, FROZEN, ""),
        append("prefetch_batch", "_search = searched_prefetch_batch  # MUTANT: the oracle under another name\n"),
        body("prefetch_batch", "return _search(unit_params, world_size, flops_per_second, bytes_per_second, "
             "compute_bytes, alpha)  # MUTANT: searched\n")),
         loses={"test_fsdp_equals_one_process_and_ddp", "test_fsdp_memory", "test_fsdp_vs_fully_shard",
                "test_peak_bytes", "test_fsdp_bad_input", "test_prefetch_batch"},
         says=("a frozen parameter: no error",
               "times as long as a few exact operations on the same arguments (allowed: 100)",
               "Write b* down as a formula",
               "peak_bytes(12, 1, 12, 0, 'backward', 16, 2, 2): expected 264.0 (walked_step on [12] * 1), got 216.0",
               "after step 1: expected the parameters of one process and of DDP (to ",
               "gradients summed, not averaged?", "bytes of gathered parameters in memory, expected 2176",
               "a unit not freed after use", "N = 2, rank 0: expected fully_shard's parameters (to ")),
    # 8.4: a rank raises its own problem before the ranks agree: with a unit without parameters on rank 1 alone, the
    # other rank waits in the collective until the launch's timeout (the bad-input test). Every unit's full gradient
    # kept after its reduce-scatter (backward's memory). The master rounded through bf16 at every gather (float32 in
    # dtype, bf16 in value: the bf16 test's exact check). A weight shared inside a unit stored once per layer that
    # uses it, each copy trained with its own layer's gradient alone (one process). 8.1: backward's transient copy of
    # a gradient forgotten (U g instead of 2 U g).
    Case("raises_alone_keeps_every_gradient_rounded_master_shared_weight_stored_twice_and_one_gradient", chain(
        replace(FSDP, AGREE, "        if problems:  # MUTANT: raised at once, alone\n"
                "            raise ValueError(\"FullyShardedDP: \" + \"; \".join(problems))\n" + AGREE),
        replace(FSDP, REDUCE, REDUCE + "        self.kept = [*getattr(self, 'kept', []), flat]  # MUTANT: kept\n"),
        replace(FSDP, ROUNDED, ROUNDED + "        if self.compute_dtype is not None:  # MUTANT: the master rounded\n"
                "            self.shards[i].data.copy_(self.shards[i].data.to(self.compute_dtype).float())\n"),
        replace(FSDP, PLACES, "params[i].setdefault((id(p), id(owner)), (p, []))[1].append((owner, name))"),
        replace("peak_bytes", GRADIENT_TERM, "unit_params * grad_bytes")),
         loses={"test_fsdp_bad_input", "test_fsdp_memory", "test_fsdp_bf16", "test_fsdp_equals_one_process_and_ddp",
                "test_peak_bytes"},
         says=("peak_bytes(12, 1, 12, 0, 'backward', 16, 2, 2): expected 264.0 (walked_step on [12] * 1), got 240.0",
               "rank 0 did not finish within 10 s",
               "more than the differences of their gradients moved it", "the master itself rounded to bf16",
               "a weight shared inside unit 1 (stored twice?)",
               "test_fsdp_memory (2 points) failed: a hidden check of exercise 8.4 failed"),
         reports=("backward held ", "every unit's full gradient kept"), hides=("every unit's full gradient kept",)),
    # 8.4: the ranks compare their units' padded shard sizes, not their parameters' shapes: Embedding(100, 1) and
    # Embedding(101, 1) on N = 3 (34 elements each) pass; a parameter in two units is not refused; and no dtypes
    # compared (a float64 model on one rank constructs). All three only in the hidden tests' N = 3. Each backward's
    # gradient assigned to the master shard's .grad, not added (only a step accumulated over micro-batches sees it,
    # hidden); a copy of the flat gradient made for the reduce-scatter (within backward's peak bound: only the
    # hidden check at the reduce-scatter sees it).
    Case("padded_sizes_compared_two_units_no_dtypes_gradient_assigned_copied_and_costs_walked", chain(
        replace(FSDP, SHAPES, "        shapes = [[(-(-sum(p.numel() for p, _ in unit.values()) // self.world),)] "
                "for unit in params]  # MUTANT: padded\n"),
        replace(FSDP, TWO_UNITS, ""),
        replace(FSDP, DTYPES, "        dtypes = []  # MUTANT: not compared\n"),
        replace(FSDP, ACCUMULATE, "        shard.grad = grad  # MUTANT: assigned\n"),
        replace(FSDP, REDUCE, "        dist.reduce_scatter_single(grad, flat.clone())  # MUTANT: a copy\n"),
        append("peak_bytes", "_walk = walked_step  # MUTANT: the oracle under another name\n"),
        body("peak_bytes", WALKED_PEAK), body("step_traffic", WALKED_TRAFFIC)),
         loses={"test_fsdp_bad_input", "test_peak_bytes", "test_step_traffic", "test_fsdp_equals_one_process_and_ddp",
                "test_fsdp_memory"},
         says=("test_fsdp_bad_input (1 points) failed: a hidden check of exercise 8.4 failed",
               "test_fsdp_equals_one_process_and_ddp (4 points) failed: a hidden check of exercise 8.4 failed",
               "test_fsdp_memory (2 points) failed: a hidden check of exercise 8.4 failed",
               "times as long as a few exact operations on the same arguments (allowed: 100)",
               "Write the peak down as a formula",
               "a walk of the ring steps thousands of times more", "Write the count down as a formula"),
         # all three of 8.4's faults are seen only on the hidden tests' N = 3: the student reads which exercise
         reports=("Embedding(101, 1) on rank 2: no error", "a parameter in two units: no error",
                  "float64 on rank 1: no error", "after a step accumulated over 2 backward passes",
                  "instead of adding to it?", "as much as another copy of the 16640-byte flat gradient"),
         hides=("Embedding(101, 1) on rank 2: no error", "as much as another copy of the 16640-byte flat gradient")),
]
