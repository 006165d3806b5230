"""Batching: consecutive blocks of a split for training (one stream per row, the cache carries
over) and for evaluation (every target scored once, each with its preceding context)."""

from collections.abc import Iterator

import numpy as np
import torch

from .corpus import DataError


def _tensor(a: np.ndarray, device: str | torch.device) -> torch.Tensor:
    return torch.from_numpy(a.astype(np.int64)).to(device)


def train_batches(
    data: np.ndarray,
    batch_size: int,
    block: int,
    start: int = 0,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Endless (pos, x, y, at) over `batch_size` parallel streams, each a contiguous row of data.

    x = rows[:, pos:pos+block], y = rows[:, pos+1:pos+block+1], both (B, block) int64, so
    consecutive yields continue each row (the cache carries over); at (B,) int64: the index in
    data of x[:, 0] (what a positional mask reads). When a row runs out the position wraps to
    0, and a yielded pos of 0 tells the caller to reset its cache. `start` resumes at a
    position.
    """
    if batch_size < 1 or block < 1 or start < 0 or len(data) // batch_size < block + 1:
        raise DataError(
            f"train_batches: {len(data)} tokens in batch_size={batch_size} rows need at least "
            f"block + 1 = {block + 1} per row (and start={start} must be >= 0)"
        )
    n = len(data) // batch_size
    rows = data[: batch_size * n].reshape(batch_size, n)
    first = torch.arange(batch_size, device=device) * n
    pos = start
    while True:
        if pos + block + 1 > n:
            pos = 0
        yield (
            pos,
            _tensor(rows[:, pos : pos + block], device),
            _tensor(rows[:, pos + 1 : pos + block + 1], device),
            first + pos,
        )
        pos += block


def eval_batches(
    data: np.ndarray,
    batch_size: int,
    block: int,
    context: int = 0,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, at) blocks, (B, block) int64, whose targets y != -100 are each of data[1:] once;
    at (B,) int64: the index in data of x[:, 0] (past the end in a padded stream's tail).

    The targets are cut into `batch_size` contiguous streams of m = ceil((N - 1 - c) / B)
    (c = min(context, N - 1)); stream b reads data[b*m : b*m + c + m + 1]: its first c inputs
    are the text before its first target, read without scoring it (y = -100), so that with
    `context` at least the model's reach every scored character sees the preceding text it
    would see in one stream, and the bpc does not depend on the batch size (docs/probes.md).
    Stream 0 starts at the text's start and scores from its first target (its c extra targets
    are its own). Streams are padded at their end to whole blocks, with y = -100 and x some valid
    token. Consecutive yields continue each stream, so the caller carries its cache across them.
    """
    n = len(data)
    if batch_size < 1 or block < 1 or context < 0 or n < 2:
        raise DataError(
            f"eval_batches: need batch_size, block >= 1, context >= 0 and 2 tokens, got "
            f"batch_size={batch_size}, block={block}, context={context}, {n} tokens"
        )
    c = min(context, n - 1)
    m = max(1, -(-(n - 1 - c) // batch_size))
    length = c + m  # inputs each stream reads
    first = np.arange(batch_size)[:, None] * m
    for pos in range(0, length, block):
        offset = pos + np.arange(block + 1)
        index = first + offset
        tokens = data[np.minimum(index, n - 1)]
        y = tokens[:, 1:].astype(np.int64)
        target = offset[1:] - 1  # the target's offset in its stream, 0-based
        scored = (target < length) & ((target >= c) | (first == 0)) & (index[:, 1:] <= n - 1)
        y[~scored] = -100
        yield (_tensor(tokens[:, :-1], device), torch.from_numpy(y).to(device),
               _tensor(index[:, 0], device))
