"""Banded (sliding-window) views between key-major and distance-major layouts, and the two
products over the band.

Queries i = 0..M-1 of a block attend over K = W - 1 + M keys [cache (W-1); block (M)].
Query i sits at key index W - 1 + i and sees keys i .. i + W - 1, i.e. distances
x = W - 1 - j for band column j = 0..W-1 (column W - 1 is the query itself).

`scores` (q.k) and `mix` (w.v) compute either densely, the whole M x K product and its band (M W
of M K entries used), or `banded`, only the band: each query against its own sliding window of
keys (`unfold`, a view), M W d multiply-adds instead of M K d. The same sums in another order,
so equal to float rounding. A matmul over a head 1 wide is an outer product or a matrix-vector
product that no BLAS runs well, and the band is a third of the entries at M = 64, W = 32: there
banded is 2 to 6 times faster. From d = 2 on, the dense matmul is faster (docs/speed.md).
"""

import torch
from torch import Tensor


def band(a: Tensor, window: int) -> Tensor:
    """(..., M, K) contiguous -> (..., M, W) zero-copy view: out[..., i, j] = a[..., i, i + j]."""
    *lead, m, k = a.shape
    stride = a.stride()
    return a.as_strided((*lead, m, window), (*stride[:-2], k + 1, 1))


def unband(w: Tensor, keys: int) -> Tensor:
    """(..., M, W) -> (..., M, K): w on the band, zeros elsewhere (the inverse of band)."""
    *lead, m, window = w.shape
    out = w.new_zeros(*lead, m, keys)
    band(out, window).copy_(w)
    return out


def distances(window: int, device: torch.device | None = None) -> Tensor:
    """(W,) distance t - r of each band column: W-1, ..., 1, 0."""
    return torch.arange(window - 1, -1, -1, device=device)


def valid_keys(m: int, window: int, cached: int, device: torch.device | None = None) -> Tensor:
    """(M, W) bool: band entries whose key exists (cache holds `cached` < W-1 real states)."""
    i = torch.arange(m, device=device)[:, None]
    j = torch.arange(window, device=device)[None, :]
    return i + j >= window - 1 - cached


def scores(q: Tensor, k: Tensor, window: int, banded: bool = False) -> Tensor:
    """q (..., M, d), keys k (..., M + W - 1, d) -> (..., M, W): s[i, j] = q_i . k_{i+j}."""
    if banded:
        return torch.linalg.vecdot(q.unsqueeze(-1), k.unfold(-2, window, 1), dim=-2)
    return band(q @ k.transpose(-1, -2), window)


def mix(w: Tensor, v: Tensor, banded: bool = False) -> Tensor:
    """Weights w (..., M, W), values v (..., M + W - 1, d) -> (..., M, d): o_i = sum_j w[i, j]
    v_{i+j}."""
    if banded:
        return torch.linalg.vecdot(w.unsqueeze(-2), v.unfold(-2, w.size(-1), 1), dim=-1)
    return unband(w, v.size(-2)) @ v
