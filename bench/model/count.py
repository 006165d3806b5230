"""Multiply-adds per predicted token, counted by fvcore on one executed prediction step.

One new token, every layer's cache full, with exact handles for the contractions. The model
caches hidden states (Transformer-XL), so that step also re-projects the W - 1 cached states
through W_k and W_v; a key/value cache (and the paper's count) projects each token once.
`counted_flops` reports the executed graph and the graph minus that re-projection, which equals
#FLOPS plus the output layer and the position term at the executed windows
(`cost.executed_flops(model, "max")`).
"""

import re
import warnings
from collections import Counter
from math import prod

import torch
from fvcore.nn import FlopCountAnalysis
from fvcore.nn.jit_handles import get_shape
from torch import nn

# Zero multiply-adds by design (the paper's #FLOPS counts contractions): element-wise arithmetic,
# softmax, LayerNorm (fvcore's default would add 5 D per norm), the embedding lookup and strided
# views. Registered, so that anything fvcore still reports as skipped is an op nobody decided on.
ZERO_OPS = ("aten::add", "aten::sub", "aten::mul", "aten::div", "aten::sum", "aten::sigmoid",
            "aten::softmax", "aten::layer_norm", "aten::embedding", "aten::as_strided",
            "aten::flip", "aten::numpy_T", "aten::unfold")
MATMUL_LIKE = re.compile(r"mm|matmul|linear|einsum|conv|attention|dot|mv$|outer|bilinear")


def _no_macs(inputs: list, outputs: list) -> int:
    return 0


CONTRACTIONS = ("aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::linear",
                "aten::einsum", "aten::linalg_vecdot")


class StepHandles:
    """Exact fvcore handles for the contractions of one traced prediction step (batch 1, one new
    token), each split by role into Counter keys:

    - projection: a weight (any value computed from parameters alone: W_q / sqrt(d_k), fc1, P)
      applied to the features (last dim) of an activation laid out (..., rows, features);
    - cache_reprojection: the rows of such a projection beyond the first: in a one-token step
      those are cached states projected again (K and V of `mem`);
    - attention: every other contraction (q.k, q.p, the talking-heads maps, w.v, GBMA's X P Mem;
      with the option `banded`, q.k and w.v are vector dots over each query's window).

    The first `n_inputs` graph inputs are the model's (token ids, caches); the rest are
    parameters, so "computed from parameters alone" is decided by walking the graph back.
    """

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs, self.memo = n_inputs, {}

    def weight(self, v: torch._C.Value) -> bool:
        """v depends on parameters only (iterative DFS; memoised over the whole graph)."""
        stack = [v]
        while stack:
            u = stack[-1]
            node = u.node()
            if node.kind() == "prim::Param":
                self.memo[u.unique()] = u.offset() >= self.n_inputs
            else:
                todo = [i for i in node.inputs() if i.unique() not in self.memo]
                if todo:
                    stack.extend(todo)
                    continue
                self.memo[u.unique()] = all(self.memo[i.unique()] for i in node.inputs())
            stack.pop()
        return self.memo[v.unique()]

    @staticmethod
    def _split(macs: int, rows: int) -> Counter:
        per = macs // rows
        return Counter({"projection": per, "cache_reprojection": macs - per})

    def matmul(self, inputs: list, outputs: list) -> Counter:
        """matmul / mm / bmm: |output| x contracted dim (broadcasting included)."""
        a, b = inputs[:2]
        sa = get_shape(a)
        macs = prod(get_shape(outputs[0])) * sa[-1]
        if self.weight(b) and not self.weight(a) and len(sa) <= 3:  # (B, rows, features) @ W
            return self._split(macs, sa[-2] if len(sa) > 1 else 1)
        return Counter({"attention": macs})

    def addmm(self, inputs: list, outputs: list) -> Counter:
        return self.matmul(inputs[1:3], outputs)  # addmm(bias, a, b, beta, alpha)

    def linear(self, inputs: list, outputs: list) -> Counter:
        """linear(x (..., rows, in), W (out, in))."""
        sx = get_shape(inputs[0])
        return self._split(prod(get_shape(outputs[0])) * sx[-1], sx[-2] if len(sx) > 1 else 1)

    def einsum(self, inputs: list, outputs: list) -> Counter:
        """Two operands, exactly: the product of every index size (fvcore's default rounds it to
        four significant digits). A projection when a weight contracts the other operand's last
        index; its rows are the index before that."""
        lhs = inputs[0].toIValue().replace(" ", "").split("->")[0].split(",")
        ops = list(inputs[1].node().inputs())
        if len(ops) != 2:
            raise NotImplementedError(f"einsum with {len(ops)} operands: count it by its path")
        size = {c: n for t, v in zip(lhs, ops, strict=True)
                for c, n in zip(t, get_shape(v), strict=True)}
        macs = prod(size.values())
        for x, w, tx, tw in ((ops[0], ops[1], *lhs), (ops[1], ops[0], *lhs[::-1])):
            if self.weight(w) and not self.weight(x) and tx[-1] in tw:
                rows = size[tx[-2]] if len(tx) > 1 and tx[-2] not in tw else 1
                return self._split(macs, rows)
        return Counter({"attention": macs})

    @staticmethod
    def vecdot(inputs: list, outputs: list) -> Counter:
        """linalg_vecdot(x, y, dim): one multiply-add per element of x and y broadcast together.
        Only the banded q.k and w.v call it (`variants.attention`): attention."""
        shape = torch.broadcast_shapes(tuple(get_shape(inputs[0])), tuple(get_shape(inputs[1])))
        return Counter({"attention": prod(shape)})

    def handles(self) -> dict:
        return {"aten::matmul": self.matmul, "aten::mm": self.matmul, "aten::bmm": self.matmul,
                "aten::addmm": self.addmm, "aten::linear": self.linear,
                "aten::einsum": self.einsum, "aten::linalg_vecdot": self.vecdot}


def _step_inputs(model: nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One new token and, for every layer, a full cache of `cache_size` hidden states."""
    device = model.emb.weight.device
    idx = torch.zeros(1, 1, dtype=torch.long, device=device)
    D = model.emb.embedding_dim
    return idx, [torch.zeros(1, b.attn.cache_size, D, device=device) for b in model.blocks]


@torch.no_grad()
def counted_flops(model: nn.Module) -> dict:
    """fvcore count of one prediction step of a TransformerLM (trimmed windows, as executed).

    Returns flops_counted_executed (the raw graph), its split into attention (everything that
    scales with the window: q.k, q.p, talking-heads maps, w.v), projection (per-token: Q, K, V, O,
    feed-forward, output, span gates, GBMA's P and Q) and cache_reprojection (K and V of the W - 1
    cached states, again), flops_counted = executed - cache_reprojection (= #FLOPS plus the q.p
    term and the output layer at the executed windows, `executed_flops(model, "max")`), and
    `skipped`:
    ops fvcore saw but counted nothing for.
    """
    was_training = model.training
    model.eval()
    idx, cache = _step_inputs(model)
    fca = FlopCountAnalysis(model, (idx, cache))
    fca.set_op_handle(**StepHandles(1 + len(cache)).handles(), **dict.fromkeys(ZERO_OPS, _no_macs))
    fca.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit deprecation notices on torch >= 2.9
        parts = fca.by_operator()
    model.train(was_training)
    skipped = dict(fca.unsupported_ops())
    if bad := sorted(op for op in skipped if MATMUL_LIKE.search(op)):
        raise RuntimeError(f"fvcore skipped matmul-like ops {bad}: add a handle to StepHandles")
    executed = sum(parts.values())
    return {"flops_counted": executed - parts["cache_reprojection"],
            "flops_counted_executed": executed, "attention": parts["attention"],
            "projection": parts["projection"], "cache_reprojection": parts["cache_reprojection"],
            "skipped": skipped}
