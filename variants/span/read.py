"""What a span policy's mask keeps, read off it outside any forward (`read_mask`): each head's
span, whether the mask reads key positions, and what it keeps at any position; a mask that
leaves a query without a key is refused here."""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..typed import OptionError


def distances(window: int, device: torch.device | None = None) -> Tensor:
    """(W,) distance t - r of each band column: W-1, ..., 1, 0."""
    return torch.arange(window - 1, -1, -1, device=device)


@dataclass(frozen=True)
class Kept:
    """What a span policy's mask keeps, read off it (`read_mask`): each head's span (h,), whether
    the mask reads positions, and the mask at any position (h | 1, 1, S), its maximum over the
    positions read (None: a hard window, or a mask computed from the input)."""

    spans: Tensor
    positional: bool
    anywhere: Tensor | None


class _Positions(Tensor):
    """Key positions that note whether a mask reads them: any torch call on one is a read."""

    read = False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _Positions.read = True
        return super().__torch_function__(func, types, args, kwargs or {})


def read_mask(policy: nn.Module) -> Kept:
    """What a span policy's mask keeps over distances 0..S-1 at the query positions 0..3S (each
    key at position q - x), read outside any forward: `policy.mask` (dist, pos), its heads
    `n_heads` and span `S`; not a mask computed from the input. An OptionError (a user's error:
    exit 2 where a command builds the layer before it runs) where it keeps nothing at distance
    0 for some head and position, naming both."""
    S, h = policy.S, policy.n_heads
    device = next(policy.parameters(), torch.zeros(())).device
    dist = distances(S, device)
    pos = (torch.arange(3 * S + 1, device=device)[:, None] - dist)[None, None]  # (1, 1, 3S + 1, S)
    pos = pos.as_subclass(_Positions)
    _Positions.read = False
    with torch.no_grad():
        m = policy.mask(dist.float(), pos)  # (B | 1, h | 1, 3S + 1 | 1, S)
    if m is None:  # a hard window of S (no tensor read: a model on the meta device too)
        return Kept(torch.full((h,), float(S), device="cpu"), False, None)
    m = torch.as_tensor(m).as_subclass(Tensor)
    m = m.reshape((1,) * (4 - m.dim()) + tuple(m.shape)).expand(-1, -1, -1, S)
    if missing := (m[..., -1] == 0).nonzero().tolist():
        _, head, row = missing[0]
        who = f"head {head}" if m.size(1) > 1 else "every head"
        at = f"the query at text position {row}" if m.size(2) > 1 else "every query"
        raise OptionError.of([(None, None, (
            f"span_policy={type(policy).__name__}: its mask keeps nothing at distance 0 ({who}, "
            f"{at}): a query that starts a stream has no other key, so its attention row would "
            "be empty; keep distance 0 (the query itself) at every position"))])
    anywhere = m.amax(dim=(0, 2))  # (h | 1, S): the most it keeps at any position
    reach = (distances(S, anywhere.device) + 1) * (anywhere != 0)  # 1 + each kept distance
    spans = reach.amax(-1).float().expand(h).clone().cpu()
    return Kept(spans, _Positions.read, anywhere.unsqueeze(1))
