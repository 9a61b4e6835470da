"""Every lab runs unchanged on GPUs: what a rank creates names its device, and the backend serves both kinds.

The static check reads every code cell of every lab's notebook. A *rank function* is a function of the notebook
that is handed to `launch(...)`, or that a rank function calls (by name, transitively; a class it builds counts
with all its methods). Inside a rank function, each tensor a torch factory creates (`torch.zeros`, `torch.tensor`,
...) passes `device=`, and each model built there is moved with `.to(...)` or takes `device=`: on a GPU box the
rank's data must live on its GPU (`utils.launch.rank_device()`), where NCCL can move it. `*_like` factories and
`.new_*` methods inherit their device and need nothing.

Without a GPU the backend choice is tested with `torch.cuda.device_count` and NCCL's availability patched.
"""

from __future__ import annotations

import ast

import pytest
import torch
import torch.distributed as dist

from nbplumbing.cells import strip_magics
from tests.common import ASSIGNMENTS, graded_cells, lab_params, notebook, source
from tests.corpus.common import solution_notebook
from utils import launch as launch_module

FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "rand",
             "randn", "randint", "randperm", "eye", "normal"}
MODELS = {"TinyNet", "Linear", "Sequential", "Conv2d", "Embedding", "LayerNorm", "BatchNorm1d"}


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _name(call: ast.Call) -> str | None:
    """`f` for f(...), `zeros` for torch.zeros(...) or nn.Linear -> `Linear`."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def rank_functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.ClassDef]:
    """The functions of a notebook that run on ranks: handed to launch(), or called by one that is.

    A class that a rank function builds counts as a whole: its methods run on the rank.
    """
    defined = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    todo = [c.args[0].id for c in _calls(tree) if _name(c) == "launch" and c.args and isinstance(c.args[0], ast.Name)]
    found: dict[str, ast.FunctionDef] = {}
    while todo:
        name = todo.pop()
        if name in defined and name not in found:
            found[name] = defined[name]
            todo += [n for c in _calls(defined[name]) if (n := _name(c)) in defined]
            # a function passed on as an argument (launch(run, 2, step_fn)) runs on the ranks too
            todo += [a.id for c in _calls(defined[name]) for a in c.args if isinstance(a, ast.Name)]
    return found


def bare_tensors(code: str) -> list[str]:
    """Where a rank function creates a tensor or a model without naming its device: "fn, line k: call"."""
    tree = ast.parse(code)
    moved = {id(c.func.value) for c in _calls(tree) if isinstance(c.func, ast.Attribute) and c.func.attr == "to"}
    problems = []
    for name, fn in rank_functions(tree).items():
        for call in _calls(fn):
            keywords = {k.arg for k in call.keywords}
            is_factory = (_name(call) in FACTORIES and isinstance(call.func, ast.Attribute)
                          and isinstance(call.func.value, ast.Name) and call.func.value.id == "torch")
            is_model = _name(call) in MODELS and id(call) not in moved
            if (is_factory or is_model) and "device" not in keywords:
                problems.append(f"{name}, line {call.lineno}: {ast.unparse(call)[:80]}")
    return problems


def notebook_code(assignment: str) -> str:
    """Every code cell of the solution notebook, in order, as one module (magics dropped)."""
    cells = [source(c) for c in notebook(solution_notebook(assignment))["cells"] if c["cell_type"] == "code"]
    return "\n\n".join(strip_magics(text) for text in cells)


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_what_ranks_create_names_its_device(assignment: str) -> None:
    problems = bare_tensors(notebook_code(assignment))
    assert not problems, (f"{assignment}: a rank creates these on the CPU whatever its device; pass "
                          "device=rank_device() (or .to(rank_device())):\n  " + "\n  ".join(problems))


def test_the_check_finds_a_planted_bare_tensor() -> None:
    planted = '''
def helper(n):
    return torch.zeros(n)  # bare: the rank's data on the CPU


def run(n):
    model = TinyNet(seed=0)
    ok = torch.ones(n, device=rank_device()) + torch.zeros_like(torch.empty(n, device="cpu"))
    return helper(n), model, TinyNet(seed=1).to(rank_device()), ok


launch(run, 2, 3, timeout=10)
torch.zeros(5)  # in the kernel, not on a rank: fine
'''
    assert sorted(bare_tensors(planted)) == ["helper, line 3: torch.zeros(n)", "run, line 7: TinyNet(seed=0)"]


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_every_exercise_is_checked(assignment: str) -> None:
    """The check sees the students' functions: every exercise that communicates is a rank function."""
    code = notebook_code(assignment)
    ranked = rank_functions(ast.parse(code))
    for gid, cell in graded_cells(notebook(solution_notebook(assignment)), "solution").items():
        tree = ast.parse(source(cell))
        talks = any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "dist"
                    for n in ast.walk(tree))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}  # methods too
        assert not talks or names & set(ranked), f"{gid}: communicates but no launch runs it"


# ---- the backend choice, with GPUs pretended -----------------------------------------------------------------


@pytest.mark.parametrize(("gpus", "world", "nccl", "expected"), [
    (0, 1, False, "gloo"),
    (1, 1, True, "cpu:gloo,cuda:nccl"),  # a one-GPU laptop, one rank
    (1, 2, True, "gloo"),  # more ranks than GPUs: every rank on the CPU
    (4, 4, True, "cpu:gloo,cuda:nccl"),
    (4, 2, True, "cpu:gloo,cuda:nccl"),
    (4, 4, False, "gloo"),  # a torch built without NCCL
])
def test_auto_backend(monkeypatch: pytest.MonkeyPatch, gpus: int, world: int, nccl: bool, expected: str) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl)
    assert launch_module._choose_backend("auto", world) == expected


def test_cpu_tensors_go_through_gloo_in_the_gpu_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's own parser of the backend string: CPU tensors to Gloo, CUDA tensors to NCCL."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    chosen = launch_module._choose_backend("nccl", 4)
    devices = dist.distributed_c10d.BackendConfig(chosen).get_device_backend_map()
    assert devices == {"cpu": "gloo", "cuda": "nccl"}


def test_nccl_needs_a_gpu_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    with pytest.raises(ValueError, match="one GPU per rank: 2 ranks, 1 GPUs"):
        launch_module._choose_backend("nccl", 2)


def test_rank_device_under_gloo_is_the_cpu() -> None:
    assert launch_module.launch(lambda: str(launch_module.rank_device()), 2, timeout=30) == ["cpu", "cpu"]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_one_group_carries_cpu_and_cuda_tensors() -> None:
    """On GPUs a rank's CUDA tensor goes over NCCL and its CPU tensor over Gloo, in the same default group."""

    def both() -> tuple[str, float, float]:
        device = launch_module.rank_device()
        on_gpu = torch.ones(3, device=device) * (dist.get_rank() + 1)
        on_cpu = torch.ones(3, device="cpu") * (dist.get_rank() + 1)
        dist.all_reduce(on_gpu)
        dist.all_reduce(on_cpu)
        return str(device), on_gpu.sum().item(), on_cpu.sum().item()

    assert launch_module.launch(both, 2, timeout=60) == [("cuda:0", 9.0, 9.0), ("cuda:1", 9.0, 9.0)]
