"""utils.models: deterministic, self-contained, and the frozen and unused parameters behave as documented."""

import pytest
import torch
import torch.nn.functional as F

from utils.models import TinyNet, regression_data


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def test_same_seed_same_model_and_other_seed_other_model() -> None:
    a, b, c = _state(TinyNet(seed=3)), _state(TinyNet(seed=3)), _state(TinyNet(seed=4))
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["fc1.weight"], c["fc1.weight"])


def test_construction_and_data_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(123)
    TinyNet(seed=0, batch_norm=True, dropout=0.5)
    regression_data(20, seed=0)
    assert torch.equal(torch.rand(5), expected)


def test_frozen_parameter_gets_no_grad_and_unused_parameter_stays_none() -> None:
    model = TinyNet(seed=0)
    assert [name for name, p in model.named_parameters() if not p.requires_grad] == ["scale"]
    X, Y = regression_data(6, seed=0)
    F.mse_loss(model(X), Y).backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert grads["scale"] is None and grads["unused"] is None
    assert all(grads[name] is not None for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"))


def test_shapes_dtypes_and_options() -> None:
    x = torch.zeros(5, 3, dtype=torch.float64)
    model = TinyNet(3, 6, 2, seed=0, batch_norm=True, dropout=0.25, dtype=torch.float64)
    assert model(x).shape == (5, 2) and model(x).dtype == torch.float64
    assert isinstance(model.norm, torch.nn.BatchNorm1d) and isinstance(model.dropout, torch.nn.Dropout)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    plain = TinyNet(seed=0)
    assert isinstance(plain.norm, torch.nn.Identity) and isinstance(plain.dropout, torch.nn.Identity)


def test_float32_and_float64_models_hold_the_same_numbers_up_to_rounding() -> None:
    m32, m64 = TinyNet(seed=1), TinyNet(seed=1, dtype=torch.float64)
    for (name, p32), p64 in zip(m32.named_parameters(), m64.parameters(), strict=True):
        assert torch.equal(p32, p64.float()), name


def test_regression_data_is_deterministic_and_float32_is_float64_rounded() -> None:
    X, Y = regression_data(50, seed=2)
    X2, Y2 = regression_data(50, seed=2)
    X64, Y64 = regression_data(50, seed=2, dtype=torch.float64)
    assert X.shape == (50, 4) and Y.shape == (50, 2) and X.dtype == Y.dtype == torch.float32
    assert torch.equal(X, X2) and torch.equal(Y, Y2)
    assert torch.equal(X, X64.float()) and torch.equal(Y, Y64.float())
    assert not torch.equal(X, regression_data(50, seed=3)[0])
    assert regression_data(0, seed=0)[0].shape == (0, 4)
    with pytest.raises(ValueError):
        regression_data(-1)


def test_the_task_is_learnable() -> None:
    """A few hundred SGD steps bring the loss from its start well down towards the noise floor (0.1**2)."""
    X, Y = regression_data(256, seed=0)
    model = TinyNet(seed=0)
    start = F.mse_loss(model(X), Y).item()
    for _ in range(300):
        model.zero_grad(set_to_none=True)
        F.mse_loss(model(X), Y).backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= 0.2 * p.grad
    assert F.mse_loss(model(X), Y).item() < min(0.05, start / 4)
