"""utils.mismatch: the words of a failing test (its doctests show the common cases; these are the edges)."""

from __future__ import annotations

import numpy as np
import torch

from utils.mismatch import Problems, first_difference, likely_mistake, scale_of, summary


def test_equal_values_of_every_kind_have_no_difference() -> None:
    assert first_difference(torch.arange(6).view(2, 3), torch.arange(6).view(2, 3)) is None
    assert first_difference(3, 3) is None and first_difference(np.ones(3), np.ones(3)) is None
    assert first_difference(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0])) is None
    assert first_difference((torch.ones(1), 2.5), (torch.ones(1), 2.5)) is None


def test_tolerance_is_absolute_plus_relative() -> None:
    expected = torch.tensor([100.0, 1.0])
    assert first_difference(expected + torch.tensor([0.5, 0.0]), expected, rtol=1e-2) is None
    found = first_difference(expected + torch.tensor([0.0, 0.5]), expected, rtol=1e-2)
    assert found == "element [1]: expected 1, got 1.5 (1 of 2 elements differ)", found


def test_shape_dtype_and_length_are_named_before_values() -> None:
    assert first_difference(torch.zeros(2, dtype=torch.float64), torch.zeros(2)) == (
        "dtype torch.float64, expected torch.float32")
    assert first_difference([torch.zeros(1)], [torch.zeros(1), torch.zeros(1)]) == "1 items, expected 2"
    assert first_difference(torch.zeros(1), [torch.zeros(1)]) == "Tensor items, expected 1"
    assert first_difference(2.0, 3.0) == "expected 3, got 2"


def test_likely_mistakes() -> None:
    x, expected = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 6.0])
    assert "in place" in likely_mistake(x.clone(), expected, original=x)
    assert "1/3" in likely_mistake(expected / 3, expected, world=3)
    assert "sign" in likely_mistake(-expected, expected)
    assert likely_mistake(expected * 2, expected, world=3) is None  # a factor that names no known mistake
    own = [(lambda g, e: bool((g == e.flip(0)).all()), "reversed: the chunks went the wrong way round")]
    assert likely_mistake(expected.flip(0), expected, hints=own) == own[0][1]
    assert scale_of(torch.zeros(2), torch.zeros(2)) is None  # no factor is defined against zeros


def test_problems_collect_sentences_that_come_back_from_ranks() -> None:
    problems = Problems()
    assert problems.compare(torch.ones(2), torch.ones(2), "rank 0") and not problems
    assert not problems.require(False, "rank 1", "traffic Totals(1, 4, 0, 0), expected Totals(2, 8, 0, 0)")
    assert problems.lines == ["rank 1: traffic Totals(1, 4, 0, 0), expected Totals(2, 8, 0, 0)"]
    assert summary(problems.lines) == problems.lines[0]
    assert summary(["a", "b"]) == "2 problems:\n  a\n  b"
