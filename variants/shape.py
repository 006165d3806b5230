"""The layer's dimensions, as it hands them to its parts (span policy, mixing policy)."""

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class Shape:
    """One layer's dimensions, as the layer resolved and checked them: the model width, the
    span limit S, heads h_k (queries and keys), h (softmax), h_v (values), their widths d_k,
    d_v, and the relative-position table to share (S, d_k) (None: the policy's own)."""

    d_model: int
    span: int
    h_k: int
    h: int
    h_v: int
    d_k: int
    d_v: int
    key_pe: nn.Parameter | None = None
