"""Lab 09 (fault tolerance): broken submissions, each losing exactly the points of what it broke.

Points: test_expected_waste 2, test_optimal_interval 2, test_checkpoint_cost 2, test_save_shards 2, test_save_atomic 2,
test_load_reshard 2, test_load_errors 2, test_load_dcp 2, test_exact_restart 2, test_restart_other_n 2,
test_killed_rank 2. The three derivations are independent functions; the tests of 9.5 write their checkpoints with a
stand-in for save_checkpoint, and those of 9.4 read the files without load_checkpoint (torch.load, and DCP's save of
the same state converted whole by DCP's own dcp_to_torch_save), so a fault of one costs only its own cells. The check
of interoperability with DCP is therefore in 9.4's test, where the student's save is graded: the student's save
against DCP's, with no load of the student's between them (9.5's DCP test loads the stand-in's files). 9.6's three
cells all restart through save and load: a fault of capture_state or restore_state loses each cell whose run it
changes (the run on another N has no dropout, no noise, no BatchNorm and one learning rate: only the sampler matters
there). Faults whose lost cells are disjoint share a submission: three submissions for twenty-two faults. The third
holds the faults that lose a real run which the first edition's tests let through (with the manifest written after
the rename, in the first, and the oldest checkpoint loaded, in the second).
"""

from tests.corpus.common import Case, body, chain, replace

ASSIGNMENT = "09_fault_tolerance"

# 9.1 by simulation: the oracle's walk, the student's own, right to its noise and thousands of times too slow.
SIMULATED = """if not tau > 0 or not mtbf > 0 or delta < 0 or restart < 0:
    raise ValueError(f"expected_waste: bad arguments {tau}, {delta}, {mtbf}, {restart}")
rng = random.Random(1)
spent, segments = 0.0, 20_000
for _ in range(segments):
    while (failure := rng.expovariate(1 / mtbf)) < tau + delta:
        spent += failure
        while (failure := rng.expovariate(1 / mtbf)) < restart:
            spent += failure
        spent += restart
    spent += tau + delta
return 1 - segments * tau / spent
"""
GATHERED = '"gathered": (others / link_bandwidth + world_size * shard_bytes / alone, float(others))'
TOGETHER = "    together = min(link_bandwidth, storage_bandwidth / world_size)\n"
SHARD_DICT = '"param_groups": state["param_groups"], "extra": extra}'
SHARD_STATE = 'for key, value in state["state"].get(0, {}).items()},'
SHARD_MASTER = 'torch.save({"master": zero.master.detach().cpu(),'
STAGING = "staging = root / f\"{final.name}.incomplete\"  # not a checkpoint's name: no loader takes it for one"
NEW_CUT = "new = shard_range(numel, zero.rank, zero.world_size)  # this rank's part in lab 07's layout on M ranks"
SAMPLER = '    job.sampler.epoch, job.sampler.position = state["epoch"], state["position"]\n'
PYTHON_RNG = '    random.setstate(state["python"])\n'
SCHEDULER = '    job.scheduler.load_state_dict(state["scheduler"])\n'
BUFFERS = """    with torch.no_grad():
        for name, buffer in job.model.named_buffers():
            buffer.copy_(state["buffers"][name])
"""
SAME_MODEL = 'if manifest["params"] != params:'
PUBLISH = "    if publish:\n        zero.publish()\n"
MANIFEST_WRITE = ("        (staging / MANIFEST).write_text(json.dumps(manifest))  # inside, before the rename: never a "
                  "name without it\n        sync_to_disk(staging / MANIFEST)\n")
RENAME = "        os.rename(staging, final)  # the commit: the checkpoint exists from here on, whole\n"
STALE = "        shutil.rmtree(staging, ignore_errors=True)  # the remains of a save that died\n"
NEWEST = "    directory = found[-1]\n"
LENGTHS = "            if tensor.numel() != length:\n"
UNREADABLE = """        try:
            shard = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch says RuntimeError, pickle's errors or EOFError: a bad file, however
            raise ValueError(f"{path}: cannot be read as a shard (truncated or not written by torch.save): "
                             f"{error}") from error
"""
YOUNG = """if not delta > 0 or not rank_mtbf > 0 or world_size < 1:
    raise ValueError(f"optimal_interval: bad arguments {delta}, {rank_mtbf}, {world_size}")
return math.sqrt(TWOdelta * rank_mtbf / world_size)
"""

CASES = [
    # 9.1 simulated (loses test_expected_waste through its time budget); 9.3's gathered checkpoint sends all N shards
    # over rank 0's link, its own too; 9.4 writes the model's full parameters into every rank's file (its bytes
    # counted) and leaves Adam's step count out of it (DCP's save of the same state has it); 9.5 cuts the loaded flat
    # vector into floor(P / M) per rank, without lab 07's padding (M = 3, 5 fail: 76 elements); 9.6 forgets the
    # sampler's position: a resumed run sees the first batches again, on any N. And: 9.4 renames the directory into
    # place, then writes the manifest into it (a kill between the two leaves a checkpoint that never loads: the test
    # kills the renaming rank just after its rename); 9.5 checks the master's length against its range, not the
    # optimizer state's (a 36-element exp_avg in a 38-element shard loads, and moves every later element).
    Case("simulated_waste_gathered_own_shard_full_state_unpadded_cut_and_forgotten_sampler", chain(
        body("expected_waste", SIMULATED),
        replace("checkpoint_cost", GATHERED,
                '"gathered": (world_size * shard_bytes / link_bandwidth + world_size * shard_bytes / alone, '
                'float(others))'),
        replace("save_checkpoint", SHARD_DICT,
                '"param_groups": state["param_groups"], "extra": extra,\n'
                '                "params": [p.detach().cpu() for p in zero.params]}'),  # the whole model, on every rank
        replace("save_checkpoint", SHARD_STATE,
                'for key, value in state["state"].get(0, {}).items() if key != "step"},'),  # MUTANT: no step count
        replace("load_checkpoint", NEW_CUT,
                "new = range(zero.rank * (numel // zero.world_size), (zero.rank + 1) * (numel // zero.world_size))"),
        replace("capture_state", SAMPLER, ""),
        replace("save_checkpoint", MANIFEST_WRITE + "        sync_to_disk(staging)  # the files' names\n" + RENAME,
                "        sync_to_disk(staging)\n" + RENAME
                + "        (final / MANIFEST).write_text(json.dumps(manifest))  # MUTANT: after the rename\n"),
        replace("load_checkpoint", LENGTHS,
                "            if tensor is shard['master'] and tensor.numel() != length:  # MUTANT: master\n")),
         says=("times as long as a few exact operations on the same arguments (allowed: 100): derive the waste, "
               "do not simulate it",
               "checkpoint_cost(3000, 3, 1000.0, 2000.0, 5000.0)['gathered']: the schedule gives",
               "more than this rank's shard written?", "state['step'] differs from what DCP saved",
               "its position restored?", "step-000000004 has no manifest of step 4",
               "test_load_errors (2 points) failed: a hidden check of exercise 9.5 failed"),
         reports=("short state: load_checkpoint returned; expected ValueError",),
         hides=("short state: load_checkpoint returned",),
         loses={"test_expected_waste", "test_checkpoint_cost", "test_save_shards", "test_save_atomic",
                "test_load_reshard", "test_load_errors", "test_exact_restart", "test_restart_other_n",
                "test_killed_rank"}),
    # 9.2 transcribes Young's interval without its 2 (1/sqrt(2) of the optimum: 6% more waste, and the simulation
    # finds 1.4 times it better); 9.4 writes in place, under the final name (a save that dies leaves a checkpoint
    # that looks newest and is partial), and cuts its master shard one element long before trimming it: the file
    # holds the clone's storage, one element of the next rank's shard more (the zip pads its records to 64 bytes, so
    # the file's size does not change: the bytes of tensor data do); 9.5 takes a checkpoint of another model whose
    # sizes add up, and forgets to publish what it loaded: the parameters stay those the model was built with (DCP's
    # comparison sees it, and so does every restart); 9.6 forgets Python's RNG: the noise of the resumed steps differs,
    # and the scheduler's state (a resumed run's StepLR counts from 0 and halves the learning rate in the wrong step;
    # the run on another N keeps one learning rate). And 9.5 loads the oldest complete checkpoint (its tests save two:
    # the step returned is 1, not 3).
    Case("interval_without_the_2_save_in_place_any_model_unpublished_load_and_forgotten_python_rng", chain(
        body("optimal_interval", YOUNG.replace("TWO", "")),  # MUTANT: Young's, without the 2
        replace("save_checkpoint", STAGING, "staging = final  # MUTANT: written in place"),
        replace("save_checkpoint", SHARD_MASTER,
                'flat = torch.cat([p.detach().reshape(-1) for p in zero.params])  # MUTANT: a view of one more\n'
                '    torch.save({"master": flat[zero.owned.start:zero.owned.stop + 1].clone()[:len(zero.owned)],'),
        replace("load_checkpoint", SAME_MODEL, "if False:  # MUTANT: any model"),
        replace("load_checkpoint", PUBLISH, ""),
        replace("capture_state", PYTHON_RNG, ""),
        replace("capture_state", SCHEDULER, ""),
        replace("load_checkpoint", NEWEST, "    directory = found[0]  # MUTANT: the oldest\n")),
         loses={"test_optimal_interval", "test_save_shards", "test_save_atomic", "test_load_reshard",
                "test_load_errors", "test_load_dcp", "test_exact_restart", "test_restart_other_n", "test_killed_rank"},
         says=("times it wastes", "returned step 1 and extras",
               "shard-00000.pt holds 320 bytes of tensor data, rank 0's master shard and optimizer "
               "state take 316: more than this rank's shard written?",
               "expected ['step-000000002'] (a directory gets a checkpoint's name only once it is whole)",
               "another model: load_checkpoint returned; expected ValueError",
               "after load_checkpoint, the parameters are not the saved master",
               "Python's RNG draws", "the scheduler's state_dict ends as")),
    # The faults that lose a run and that the first edition's tests let through, with Young's interval copied from the
    # literature: 9.2 returns sqrt(2 delta M) (fine for delta << M; 0.75% to 2.1% more waste at delta / M from 0.1 to
    # 0.5, the hidden cases); 9.3 gives every parallel writer the whole file system, as if each had a disk of its
    # own (the first edition's model); 9.4 leaves the remains of a save that died where the next save of that step
    # puts its own (the restarted job cannot save again); 9.5 lets torch.load's RuntimeError through on a truncated
    # shard;
    # 9.6 restores the sampler's position in the wrong epoch (the exact restart resumes in the second epoch), and
    # forgets the buffers (BatchNorm's statistics: only the exact restart's runs have a BatchNorm).
    Case("young_stale_staging_unreadable_shard_and_forgotten_epoch", chain(
        body("optimal_interval", YOUNG.replace("TWO", "2 * ")),  # MUTANT: Young's, copied
        replace("checkpoint_cost", TOGETHER,
                "    together = min(link_bandwidth, storage_bandwidth)  # MUTANT: unshared\n"),
        replace("save_checkpoint", STALE, ""),
        replace("load_checkpoint", UNREADABLE,
                "        shard = torch.load(path, map_location='cpu', weights_only=True)  # MUTANT: torch's errors\n"),
        replace("capture_state", SAMPLER, '    job.sampler.position = state["position"]  # MUTANT: not the epoch\n'),
        replace("capture_state", BUFFERS, "")),
         loses={"test_optimal_interval", "test_checkpoint_cost", "test_save_atomic", "test_load_errors",
                "test_exact_restart"},
         says=("the save of step 4 run again after the one that died did not complete: FileExistsError",
               "the sampler ends at (epoch, position) (0, 48), expected (1, 48)",
               "the model's buffers (BatchNorm's running mean and variance, its count) differ",
               "test_optimal_interval (2 points) failed: a hidden check of exercise 9.2 failed"),
         # 9.2's hidden case and the student's value, to 12 digits (issue 45's leak): the instructor's only
         reports=("test_optimal_interval (2 points) failed: (a hidden check, not shown to the student) AssertionError: "
                  "(600.0, 24000.0, 4, 2683.28",), hides=("(600.0, 24000.0, 4, 2683.28",)),
]
