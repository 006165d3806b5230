"""Banded (sliding-window) views between key-major and distance-major layouts.

Queries i = 0..M-1 of a block attend over K = W - 1 + M keys [cache (W-1); block (M)].
Query i sits at key index W - 1 + i and sees keys i .. i + W - 1, i.e. distances
x = W - 1 - j for band column j = 0..W-1 (column W - 1 is the query itself).
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
