"""The fast-path helpers of groups.py against the plain torch operations they replace."""

import numpy as np
import pytest
import torch

from mrgrpo.estimators.groups import batch_standardize, column_extremes, minus_columns, standardize_kept


@pytest.mark.parametrize("n", [1, 63, 64, 1000, 4097])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_column_extremes_and_minus_columns_are_exact(n, dtype):
    x = torch.randn(n, 5, dtype=dtype, generator=torch.Generator().manual_seed(n)) * 1e3
    low, high = column_extremes(x)
    assert torch.equal(low, x.amin(dim=0)) and torch.equal(high, x.amax(dim=0))
    shift = x[n // 2]
    assert torch.equal(minus_columns(x, shift), x - shift)
    strided = x.T.contiguous().T  # not contiguous: the plain path
    assert torch.equal(column_extremes(strided)[0], low) and torch.equal(minus_columns(strided, shift), x - shift)
    x[n - 1, 2] = float("nan")
    low, high = column_extremes(x)
    assert bool(torch.isnan(low[2])) and bool(torch.isnan(high[2])) and torch.equal(low[:2], x[:, :2].amin(dim=0))


def _exact_standardized(values, kept, ddof, eps):
    x = values.numpy().astype(np.longdouble)[kept.numpy()]
    out = np.zeros(values.numel(), dtype=np.longdouble)
    if x.size and x.min() != x.max():
        std = np.sqrt(((x - x.mean()) ** 2).sum() / (x.size - ddof)) if x.size > ddof else 0
        out[kept.numpy()] = (x - x.mean()) / (std + eps)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standardize_kept_matches_batch_standardize(dtype):
    # Offsets far above the spread (the mean's rounding matters), every kept value equal (zeros),
    # one kept row, huge and tiny magnitudes (the power-of-two rescaling), ddof 0 and 1.
    generator = torch.Generator().manual_seed(0)
    for trial in range(120):
        n = int(torch.randint(1, 2000, (1,), generator=generator))
        scale = 10.0 ** float(torch.randint(-35, 35, (1,), generator=generator))
        values = torch.randn(n, dtype=dtype, generator=generator) * scale + (trial % 3) * float(torch.randn(1, generator=generator))
        kept = torch.rand(n, generator=generator) < float(torch.rand(1, generator=generator))
        if trial % 6 == 0:
            values = torch.where(kept, torch.full_like(values, 3.7), values)
        ddof, eps = trial % 2, 1e-6 if trial % 4 else 0.0
        ours, plain = standardize_kept(values, kept, ddof, eps), batch_standardize(values, kept, ddof, eps)
        assert bool((ours[~kept] == 0).all()) and not bool(torch.signbit(ours[~kept]).any())
        if trial % 6 == 0 or int(kept.sum()) <= 1:
            assert bool((ours == 0).all()) and bool((plain == 0).all())
            continue
        exact = _exact_standardized(values, kept, ddof, eps)
        floor = 1e-6 if dtype == torch.float32 else 1e-14
        ours_error = float(np.abs(ours.numpy().astype(np.longdouble) - exact).max())
        plain_error = float(np.abs(plain.numpy().astype(np.longdouble) - exact).max())
        assert ours_error <= 2 * plain_error + floor, (trial, ours_error, plain_error)
