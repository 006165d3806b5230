"""The transformer body shared by every variant (docs/variants.md)."""

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import variants
from bench.config import ModelConfig


def reach(cache_sizes: Iterable[int]) -> int:
    """Characters of preceding text an output can depend on, the one definition: each layer
    looks back over the `cache_size` states of the layer below, so L layers reach the sum of
    them; at the span limit S (S - 1 cached states a layer), L (S - 1)."""
    return sum(cache_sizes)


class FeedForward(nn.Module):
    """ReLU MLP D -> F -> D with dropout on the ReLU activations."""

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        for fc in (self.fc1, self.fc2):
            b = 1 / math.sqrt(fc.in_features)
            nn.init.uniform_(fc.weight, -b, b)
            nn.init.uniform_(fc.bias, -b, b)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class Block(nn.Module):
    """[attention, feed-forward], each with a residual and LayerNorm (post-norm by default)."""

    def __init__(self, m: ModelConfig, key_pe: nn.Parameter | None = None) -> None:
        super().__init__()
        self.attn = variants.Attention(m.layer, key_pe)  # its options as the schema typed them
        self.ff = FeedForward(m.d_model, m.d_ff, m.dropout)
        self.ln1, self.ln2 = nn.LayerNorm(m.d_model), nn.LayerNorm(m.d_model)
        self.pre = m.norm == "pre"

    def forward(self, h: Tensor, cache: Tensor | None, start: Tensor | None = None
                ) -> tuple[Tensor, Tensor]:
        """h (B, M, D) -> (B, M, D), and this layer's attention input (B, M, D) for the cache;
        start (B,): the text position of each row's first symbol (`Attention`)."""
        if self.pre:
            a = self.ln1(h)
            h = h + self.attn(a, cache, start)
            return h + self.ff(self.ln2(h)), a
        h2 = self.ln1(h + self.attn(h, cache, start))
        return self.ln2(h2 + self.ff(h2)), h


class TransformerLM(nn.Module):
    """Character LM: embedding, L blocks, output softmax over the vocab.

    Built from its config `m` (`bench.config.ModelConfig`, validated there) over `vocab_size`
    symbols. forward(idx (B, M), cache, start) -> logits (B, M, V), new cache; the cache is a
    list of L tensors (B, C_l, D) holding each layer's last `cache_size` attention inputs,
    detached; start (B,) int64, the text position of idx[:, 0] (its index in the split), is read
    by span policies whose masks see absolute positions (`SpanPolicy.mask`'s `pos`).
    `m.shared_pe`: one relative-position table `key_pe` (S, d_k) for every layer, as in the
    adaptive-span reference and the paper's parameter counts; False: a table per layer.
    """

    def __init__(self, m: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        if not (isinstance(vocab_size, int) and vocab_size > 0):
            raise ValueError(f"vocab_size={vocab_size!r} is invalid: expected a positive int")
        self.emb = nn.Embedding(vocab_size, m.d_model)
        nn.init.normal_(self.emb.weight)
        self.blocks = nn.ModuleList([Block(m)])
        # the shared table is the body's (named `key_pe`); it takes the first layer's shape and
        # initialisation, (S, d_k) whatever the variant's d_k, and is passed to every other layer
        self.key_pe = self.blocks[0].attn.key_pe if m.shared_pe else None
        self.blocks.extend(Block(m, self.key_pe) for _ in range(m.n_layers - 1))
        self.ln_f = nn.LayerNorm(m.d_model) if m.norm == "pre" else nn.Identity()
        self.head = nn.Linear(m.d_model, vocab_size)

    def forward(self, idx: Tensor, cache: list[Tensor] | None = None,
                start: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:
        h = self.emb(idx)
        new_cache = []
        for layer, block in enumerate(self.blocks):
            c = None if cache is None else cache[layer]
            h, a = block(h, c, start)
            keep = block.attn.cache_size
            mem = a if c is None else torch.cat([c, a], dim=1)
            new_cache.append(mem[:, mem.size(1) - min(keep, mem.size(1)):].detach())
        return self.head(self.ln_f(h)), new_cache

    @property
    def reach(self) -> int:
        """`reach` of this model's layers at their current windows (what evaluation reads
        unscored before it scores)."""
        return reach(b.attn.cache_size for b in self.blocks)

    def span_penalty(self) -> Tensor:
        """Every layer's `Attention.span_penalty`, summed."""
        return sum(b.attn.span_penalty() for b in self.blocks)

    def spans(self) -> list[Tensor]:
        """Per layer, (h,) effective span of each head."""
        return [b.attn.spans() for b in self.blocks]

    def clamp_(self) -> None:
        """After each optimiser step: project spans back to [0, S] and re-trim the windows."""
        for b in self.blocks:
            b.attn.clamp_()
