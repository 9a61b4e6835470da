"""Run a function of a lab's notebook as a script, on every rank torchrun starts.

    torchrun --standalone --nproc-per-node=2 -m utils.notebook_script NOTEBOOK FUNCTION [ARG ...]

The notebook's definitions are read from its nbgrader cells that are not tests (the setup cell, the given code,
the solution cells): their imports, functions, classes and assignments, in order, and nothing else (no print, no
loop, no experiment). Then `launch(FUNCTION, WORLD_SIZE, *ARGS)` runs it on this rank (utils.launch under
torchrun: in torchrun's group) with the arguments as strings; `--save PATH` has rank 0 write every rank's result
there with torch.save. Lab 09 restarts a killed rank with it under `torchrun --max-restarts` (its section 5).

    srun --ntasks=2 python -m utils.notebook_script NOTEBOOK FUNCTION [ARG ...]

runs it with one task of Slurm's `srun` per rank instead (utils.launch.slurm_rank_environment: the rendezvous on the
step's first node); torchrun under srun, one agent per node, is torchrun's case (docs/gpus-and-clusters.md).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from utils.launch import launch, slurm_rank_environment

__all__ = ["definitions", "main"]

KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def definitions(notebook: Path) -> dict[str, Any]:
    """The namespace that the definitions of `notebook`'s setup, given and solution cells make, executed in order.

    A cell counts when it has nbgrader metadata and is not a test (no points); of its top-level statements, only
    imports, function and class definitions and assignments run.
    """
    # A module of its own, so that what the notebook defines pickles by name (results gathered from every rank)
    module = types.ModuleType("__notebook__", f"the definitions of {notebook}")
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        grading = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or not grading or grading.get("points") or grading.get("grade"):
            continue
        source = "".join(cell["source"])
        tree = ast.parse(source, filename=f"{notebook}:{grading.get('grade_id')}")
        kept = ast.Module([node for node in tree.body if isinstance(node, KEPT)], type_ignores=[])
        exec(compile(kept, f"{notebook}:{grading.get('grade_id')}", "exec"), namespace)
    return namespace


def main(argv: list[str] | None = None) -> list[Any]:
    """Run the script: parse argv, load the notebook's definitions, launch the function on this rank."""
    parser = argparse.ArgumentParser(prog="python -m utils.notebook_script", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path, help="a lab's notebook (.ipynb)")
    parser.add_argument("function", help="the name of a function the notebook defines, to run on every rank")
    parser.add_argument("args", nargs="*", help="its arguments, as strings")
    parser.add_argument("--save", type=Path, help="rank 0 writes every rank's result there (torch.save)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a hang fails (default 120)")
    options = parser.parse_args(argv)
    if "TORCHELASTIC_RUN_ID" not in os.environ and "SLURM_STEP_ID" in os.environ:
        os.environ.update(slurm_rank_environment(dict(os.environ)))  # a task of srun: a rank, as torchrun's would be
    elif "TORCHELASTIC_RUN_ID" not in os.environ:
        parser.error("run it under torchrun (torchrun --standalone --nproc-per-node=N -m utils.notebook_script ...) "
                     "or as the tasks of srun (srun --ntasks=N python -m utils.notebook_script ...)")
    fn: Callable[..., Any] | None = definitions(options.notebook).get(options.function)
    if not callable(fn):
        parser.error(f"{options.notebook} defines no function {options.function!r} (outside its test cells)")
    results = launch(fn, int(os.environ["WORLD_SIZE"]), *options.args, timeout=options.timeout)
    if options.save is not None and int(os.environ["RANK"]) == 0:
        torch.save(results, options.save)
    return results


if __name__ == "__main__":
    main()
