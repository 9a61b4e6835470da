"""Every name that autograder/tamper.py flags exists where it says, so that a rename in torch or in utils/ fails here.

tamper.PRIVATE_INTERNALS names, as strings, torch's private distributed internals and the switches of the traffic
ledger (utils.p2p_ledger) and of the NCCL emulation (utils.nccl_rules): no import ties them to what they name. WHERE
says, for each, what it names; the test imports or looks up every one, in the torch installed and in this
repository's utils/.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch
import torch.distributed as dist

import utils.p2p_ledger as p2p_ledger
from autograder.tamper import PRIVATE_INTERNALS, private_internals

# name -> ("module", module path) | ("attribute", object path, attribute) | ("operators", namespace of torch.ops)
WHERE: dict[str, tuple[str, ...]] = {
    "_functional_collectives": ("module", "torch.distributed._functional_collectives"),
    "_functional_collectives_impl": ("module", "torch.distributed._functional_collectives_impl"),
    "_symmetric_memory": ("module", "torch.distributed._symmetric_memory"),
    "_python_dispatch": ("module", "torch.utils._python_dispatch"),
    "_distributed_c10d": ("module", "torch._C._distributed_c10d"),
    "_c10d_functional": ("operators", "_c10d_functional"),
    "c10d_functional": ("operators", "c10d_functional"),
    "_c10d_functional_autograd": ("operators", "_c10d_functional_autograd"),
    "c10d": ("operators", "c10d"),
    "_dtensor": ("operators", "_dtensor"),
    "symm_mem": ("operators", "symm_mem"),
    "_get_backend": ("attribute", "torch.distributed", "ProcessGroup", "_get_backend"),
    "ProcessGroupGloo": ("attribute", "torch.distributed", "ProcessGroupGloo"),
    "ProcessGroupNCCL": ("attribute", "torch.distributed", "ProcessGroupNCCL"),
    "_broadcast_coalesced": ("attribute", "torch.distributed", "_broadcast_coalesced"),
    "_jit_get_operation": ("attribute", "torch._C", "_jit_get_operation"),
    "_pop_torch_dispatch_stack": ("attribute", "torch._C", "_pop_torch_dispatch_stack"),
    "_unset_dispatch_mode": ("attribute", "torch._C", "_unset_dispatch_mode"),
    "_DisableTorchDispatch": ("attribute", "torch._C", "_DisableTorchDispatch"),
    "unrestricted": ("attribute", "utils.p2p_ledger", "unrestricted"),
    "_calls": ("attribute", "utils.p2p_ledger", "_calls"),
    "NcclRules": ("attribute", "utils.nccl_rules", "NcclRules"),
    "emulating": ("attribute", "utils.nccl_rules", "emulating"),
}


def test_every_flagged_name_is_placed() -> None:
    assert set(WHERE) == set(PRIVATE_INTERNALS)


def _operator_namespaces() -> set[str]:
    # The functional collectives register their operators when imported (the legacy c10d_functional ones too).
    importlib.import_module("torch.distributed._functional_collectives")
    importlib.import_module("torch.distributed.tensor")
    return {name.split("::")[0] for name in torch._C._dispatch_get_all_op_names()}


@pytest.mark.parametrize("name", sorted(WHERE))
def test_every_flagged_name_exists(name: str) -> None:
    kind, path, *attributes = WHERE[name]
    if kind == "operators":
        assert path in _operator_namespaces(), f"torch registers no operators in torch.ops.{path}"
    elif name == "ProcessGroupNCCL" and not dist.is_nccl_available():
        # A torch without NCCL (the CPU wheel) has no such class, and binds the name only where it has NCCL.
        assert "ProcessGroupNCCL" in inspect.getsource(dist.distributed_c10d)
    else:
        found = importlib.import_module(path)
        for attribute in attributes:
            found = getattr(found, attribute)
        assert found is not None and (kind == "module" or attributes[-1] == name)


def test_the_ledgers_switches_are_what_its_guard_reads() -> None:
    """`unrestricted()` is the ledger's switch and `_calls` the state it sets: named in a cell, they are flagged."""
    with p2p_ledger.unrestricted():
        assert p2p_ledger._calls.unrestricted > 0
    assert p2p_ledger._calls.unrestricted == 0
    assert private_internals("from utils.p2p_ledger import unrestricted\nutils.p2p_ledger._calls.depth = 1") == {
        "unrestricted", "_calls"}


def test_a_replaced_helper_is_found_under_any_alias() -> None:
    """`torch.equal = ...` and the same through `import torch as t`, `from torch import nn as n`, or `t2 = torch`:
    each is a replaced grading helper, and every test cell after it is untrusted."""
    from autograder.tamper import find_tampering

    def nb(student: str) -> dict:
        return {"cells": [
            {"cell_type": "code", "source": "import torch",
             "metadata": {"nbgrader": {"grade_id": "setup", "locked": True}}},
            {"cell_type": "code", "source": student, "metadata": {"nbgrader": {"grade_id": "ex", "locked": False}}},
            {"cell_type": "code", "source": "assert torch.equal(a, a)",
             "metadata": {"nbgrader": {"grade_id": "test_ex", "grade": True, "locked": True, "points": 1}}}]}

    for student, patched in (("torch.equal = all", "torch.equal"), ("import torch as _t\n_t.equal = all", "_t.equal"),
                             ("from torch import nn as n\nn.Module = object", "n.Module"),
                             ("t2 = torch\nsetattr(t2, 'equal', all)", "t2.<setattr>")):
        found, untrusted = find_tampering(nb(student), nb(""), "nb")
        assert found == [f"nb: ex replaces {patched} (a grading helper)"] and untrusted == ["test_ex"], student
    assert find_tampering(nb("import numpy as np\nnp.x = 1\nt = torch.ones(1)\nt.grad = None"), nb(""), "nb") \
        == ([], [])
