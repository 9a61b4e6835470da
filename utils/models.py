"""Small deterministic models and data sets for the labs: same seed, same numbers, on every rank and every run.

    from utils.models import TinyNet, regression_data

    X, Y = regression_data(64, seed=0)      # X: (64, 4), Y: (64, 2), float32
    model = TinyNet(seed=0)                 # identical parameters wherever it is built with seed 0
    loss = torch.nn.functional.mse_loss(model(X), Y)

Nothing here downloads anything or touches the global random number generator: every random draw comes from
a torch.Generator seeded by the caller, so building a model or a data set on rank 3 gives the same tensors as
on rank 0, and building one does not shift the random stream of the code around it.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TinyNet", "regression_data"]


class TinyNet(nn.Module):
    """A two-layer perceptron with the parameters that make gradient synchronisation tricky.

    forward(x) = scale * fc2(dropout(tanh(norm(fc1(x)))))

    - `fc1`, `fc2`: ordinary trainable nn.Linear layers.
    - `scale`: a *frozen* parameter (requires_grad=False) used in forward: it never gets a .grad, and a
      correct optimiser or gradient synchroniser leaves it untouched.
    - `unused`: a trainable parameter that forward never uses: after backward its .grad is still None.
    - `norm`: nn.BatchNorm1d(hidden) if `batch_norm`, else the identity.
    - `dropout`: nn.Dropout(dropout) if dropout > 0, else the identity.

    Parameters are drawn from a torch.Generator seeded with `seed` (the global RNG is not used), so two
    TinyNets built with the same arguments are identical, on any rank.

    Args:
        in_features, hidden, out_features: layer widths.
        seed: seed of the parameter initialisation.
        batch_norm: put a BatchNorm1d between fc1 and tanh.
        dropout: dropout probability after tanh (0 means no dropout layer).
        dtype: dtype of every parameter (torch.float64 gives a near-exact reference).
        device: where the parameters live (a rank passes `utils.launch.rank_device()`); they are drawn on the
            CPU first, so every device gets the same numbers.

    Example:
        >>> model = TinyNet(seed=0)
        >>> model(torch.zeros(5, 4)).shape
        torch.Size([5, 2])
        >>> [name for name, p in model.named_parameters() if not p.requires_grad]
        ['scale']
    """

    def __init__(
        self,
        in_features: int = 4,
        hidden: int = 8,
        out_features: int = 2,
        *,
        seed: int = 0,
        batch_norm: bool = False,
        dropout: float = 0.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        # skip_init: nn.Linear would draw its default initialisation from the global RNG, which we leave alone
        self.fc1 = nn.utils.skip_init(nn.Linear, in_features, hidden, dtype=dtype)
        self.norm = nn.BatchNorm1d(hidden, dtype=dtype) if batch_norm else nn.Identity()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc2 = nn.utils.skip_init(nn.Linear, hidden, out_features, dtype=dtype)
        self.scale = nn.Parameter(torch.tensor(1.5, dtype=dtype), requires_grad=False)
        self.unused = nn.Parameter(torch.zeros(3, dtype=dtype))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in (self.fc1, self.fc2):
                bound = layer.in_features**-0.5  # nn.Linear's default range, drawn from our generator
                for p in (layer.weight, layer.bias):
                    p.copy_(torch.empty(p.shape, dtype=torch.float64).uniform_(-bound, bound, generator=generator))
            self.unused.copy_(torch.randn(self.unused.shape, dtype=torch.float64, generator=generator))
        self.to(device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, in_features) -> (batch, out_features)."""
        hidden = self.dropout(torch.tanh(self.norm(self.fc1(x))))  # (batch, hidden)
        return self.scale * self.fc2(hidden)  # (batch, out_features)


def regression_data(
    n_samples: int,
    in_features: int = 4,
    out_features: int = 2,
    *,
    seed: int = 0,
    noise: float = 0.1,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic regression data set: Y = sin(X @ W) + noise * standard normal, with a random teacher W.

    Args:
        n_samples: number of samples (rows).
        in_features, out_features: widths of X and Y.
        seed: seed of X, W and the noise (a torch.Generator; the global RNG is not used).
        noise: standard deviation of the additive Gaussian noise.
        dtype: dtype of X and Y. The numbers are drawn in float64 and rounded once, so the float32 and the
            float64 data sets of one seed hold the same values up to that rounding.
        device: where X and Y live (drawn on the CPU first: the same numbers on every device).

    Returns:
        X: (n_samples, in_features), entries standard normal.
        Y: (n_samples, out_features), entries in about [-1 - 3 * noise, 1 + 3 * noise].

    Example:
        >>> X, Y = regression_data(10, seed=1)
        >>> X.shape, Y.shape, X.dtype
        (torch.Size([10, 4]), torch.Size([10, 2]), torch.float32)
    """
    if n_samples < 0:
        raise ValueError(f"n_samples must be >= 0, got {n_samples}")
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(in_features, out_features, dtype=torch.float64, generator=generator)
    teacher /= in_features**0.5  # keeps X @ W of order 1
    X = torch.randn(n_samples, in_features, dtype=torch.float64, generator=generator)
    Y = torch.sin(X @ teacher) + noise * torch.randn(n_samples, out_features, dtype=torch.float64, generator=generator)
    return X.to(device, dtype), Y.to(device, dtype)
