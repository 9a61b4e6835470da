"""Every lab has each of its test pieces in tests/labs/labNN/ (tests/labs/__init__.py lists them), and that folder
holds nothing for a lab that does not exist: a lab added without its corpus or its derivations module, or one whose
entry was dropped, fails here with the lab and the missing piece named. A second or so.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from tests import labs
from tests.common import ASSIGNMENTS, lab_marker, lab_params
from tests.corpus.common import Case


def load(path: Path) -> ModuleType:
    """The module at `path`, imported from that file (so that a copy of a lab's folder can be checked too)."""
    spec = importlib.util.spec_from_file_location(  # not put in sys.modules: a copy does not replace the original
        f"lab_piece_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def missing_pieces(assignment: str, root: Path = labs.HERE) -> list[str]:
    """What the assignment's folder under `root` lacks, one sentence each that names the lab and the piece."""
    folder = root / lab_marker(assignment)
    where = f"tests/labs/{folder.name}"
    if not folder.is_dir():
        return [f"{assignment}: no folder {where}/ (its corpus.py and derivations.py, tests/labs/__init__.py)"]
    found = []
    if not (folder / "corpus.py").is_file():
        found.append(f"{assignment}: no {where}/corpus.py (its broken submissions, tests/corpus/common.py says how)")
    else:
        corpus = load(folder / "corpus.py")
        if getattr(corpus, "ASSIGNMENT", None) != assignment:
            found.append(f"{assignment}: {where}/corpus.py has ASSIGNMENT {getattr(corpus, 'ASSIGNMENT', None)!r}")
        cases = getattr(corpus, "CASES", [])
        if not cases or not all(isinstance(c, Case) for c in cases):
            found.append(f"{assignment}: {where}/corpus.py has no CASES (a list of at least one Case)")
    if not (folder / "derivations.py").is_file():
        found.append(f"{assignment}: no {where}/derivations.py (DERIVATIONS, or [] and NO_DERIVATION saying why)")
    else:
        module = load(folder / "derivations.py")
        entries = getattr(module, "DERIVATIONS", None)
        if not isinstance(entries, list):
            found.append(f"{assignment}: {where}/derivations.py has no list DERIVATIONS")
        elif not entries and not getattr(module, "NO_DERIVATION", "").strip():
            found.append(f"{assignment}: {where}/derivations.py has no derivation entry, and no NO_DERIVATION "
                         "that says why the lab has none")
        elif others := sorted({d.assignment for d in entries} - {assignment}):
            found.append(f"{assignment}: {where}/derivations.py has entries of {others}")
    strays = [p.name for p in folder.glob("test_*.py") if p.stem != f"test_{folder.name}"]
    if strays:
        found.append(f"{assignment}: {where} has tests {strays} not named test_{folder.name}.py (the name that "
                     f"gives them the marker {folder.name}, tests/conftest.py)")
    return found


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_every_lab_has_its_pieces(assignment: str) -> None:
    assert not (found := missing_pieces(assignment)), "\n".join(found)


def test_no_pieces_of_a_lab_that_does_not_exist() -> None:
    strays = sorted({p.name for p in labs.folders()} - {lab_marker(a) for a in ASSIGNMENTS})
    assert not strays, f"tests/labs/ has folders of no lab in solutions/: {strays}"


def test_a_lab_without_its_corpus_or_derivations_is_named(tmp_path: Path) -> None:
    """The mutants: lab 05's folder copied without its corpus and with an empty DERIVATIONS, with and without a
    reason; then no folder at all."""
    lab = labs.folder("05_large_batch")
    shutil.copytree(lab, tmp_path / lab.name, ignore=shutil.ignore_patterns("__pycache__"))
    assert missing_pieces("05_large_batch", tmp_path) == []
    (tmp_path / lab.name / "corpus.py").unlink()
    (tmp_path / lab.name / "derivations.py").write_text("DERIVATIONS = []\n")
    assert missing_pieces("05_large_batch", tmp_path) == [
        "05_large_batch: no tests/labs/lab05/corpus.py (its broken submissions, tests/corpus/common.py says how)",
        "05_large_batch: tests/labs/lab05/derivations.py has no derivation entry, and no NO_DERIVATION that says why "
        "the lab has none"]
    (tmp_path / lab.name / "derivations.py").write_text("DERIVATIONS = []\nNO_DERIVATION = 'nothing is derived'\n")
    assert [p for p in missing_pieces("05_large_batch", tmp_path) if "derivations" in p] == []
    shutil.rmtree(tmp_path / lab.name)
    assert missing_pieces("05_large_batch", tmp_path) == [
        "05_large_batch: no folder tests/labs/lab05/ (its corpus.py and derivations.py, tests/labs/__init__.py)"]
