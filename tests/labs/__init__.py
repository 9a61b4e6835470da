"""Each lab's test pieces in one folder, tests/labs/labNN/ (NN: the lab's number, as in solutions/NN_name/):

- corpus.py: its broken submissions (tests/corpus/common.py says how), `ASSIGNMENT` and a non-empty `CASES`;
- derivations.py: its derivation exercises, `DERIVATIONS: list[Derivation]` (tests/test_derivations.py scans the
  student edition for them), or an empty list and `NO_DERIVATION`, a sentence that says why the lab has none;
- test_labNN.py, where the lab has tests of its own (optional): what is particular to it.

The shared machinery stays where it is (tests/corpus/, tests/test_derivations.py) and finds these pieces here;
tests/test_lab_pieces.py checks that every lab has each required one.

    from tests import labs
    labs.corpus_modules()["05_large_batch"].CASES
    labs.derivations()          # every lab's Derivation entries, in lab order
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REQUIRED = ("corpus", "derivations")  # the modules every lab's folder must have


@dataclass(frozen=True)
class Derivation:
    """A derived result: the solution cell that computes it, the ways it could be printed, its values at scale."""

    assignment: str  # e.g. "01_collectives"
    grade_id: str  # the solution cell
    forms: tuple[str, ...]  # written as `normal` (tests/test_derivations.py) leaves them
    values: tuple[str, ...] = ()  # values at three hidden-test points, as printed to 3 significant figures
    # Statements of the answer in any word order: each a tuple of fragments (written as `normal` leaves them) that,
    # all found in one sentence, give it away ("per unit", "two all-gathers", "one reduce-scatter")
    sentences: tuple[tuple[str, ...], ...] = ()
    # Its values at the points of the notebook's own examples (a paper's model, a real machine), as a text rounds them
    # (three_figures of "31.4 GB" is "31.4"): printed beside the exercise, they are a table to fit. An instructor cell
    # of the solution checks each.
    quoted: tuple[str, ...] = ()


def lab_marker(assignment: str) -> str:
    """An assignment's lab: "02_ring_allreduce" -> "lab02", its folder's name here and the marker of its tests."""
    return "lab" + assignment.split("_")[0]


def folder(assignment: str) -> Path:
    """The folder of an assignment's test pieces: "05_large_batch" -> tests/labs/lab05."""
    return HERE / lab_marker(assignment)


def folders() -> list[Path]:
    """Every tests/labs/labNN folder, in lab order."""
    return sorted(p for p in HERE.glob("lab*") if p.is_dir())


def piece(lab: Path, name: str) -> ModuleType:
    """The module `name` ("corpus", "derivations") of a lab's folder."""
    return importlib.import_module(f"{__name__}.{lab.name}.{name}")


def corpus_modules() -> dict[str, ModuleType]:
    """assignment -> its corpus module, for every tests/labs/labNN/corpus.py."""
    modules = [piece(lab, "corpus") for lab in folders() if (lab / "corpus.py").is_file()]
    return {m.ASSIGNMENT: m for m in modules}


def derivations() -> list[Derivation]:
    """Every lab's DERIVATIONS (tests/labs/labNN/derivations.py), in lab order."""
    return [d for lab in folders() if (lab / "derivations.py").is_file() for d in piece(lab, "derivations").DERIVATIONS]
