"""The run record: what `bench.training.loop.train` returns and writes as result.json, typed,
so that `bench.tracking`, `bench.report` and `ci.regression` read fields rather than string
keys."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import (
    Any,
    NotRequired,  # pydantic needs them on Python < 3.12
)

from pydantic import TypeAdapter
from typing_extensions import TypedDict


class Evaluation(TypedDict):
    """One evaluation during training: what is logged per step and handed to `report`."""

    step: int
    tokens: int
    train_bpc: float
    dev_bpc: float  # on the first train.eval_tokens dev characters when set
    lr: float
    tokens_per_s: float
    train_time_s: float
    mean_span: float
    probe_bpc: dict[str, float]  # per target set of the corpus (`rest` too): dev bpc on it
    peak_rss_mb: float  # the process's peak resident memory so far
    peak_cuda_mb: NotRequired[float]  # CUDA only: peak allocated in this evaluation window


class SpanTrace(TypedDict):
    """Dynamic span z_t along a sample text (adaptive-span Figure 5)."""

    text: str
    z: list[float]


@dataclass(frozen=True)
class RunResult:
    """A finished run: final bpc of the best checkpoint over the whole splits, cost, spans."""

    dev_bpc: float
    test_bpc: float
    steps: int
    tokens: int
    stopped_early: bool
    tokens_per_s: float
    peak_rss_mb: float  # the whole run's peak resident memory (the process's, imports included)
    peak_cuda_mb: float | None  # the largest evaluation window's CUDA peak; None off CUDA
    params: int
    params_non_embedding: int
    flops_full: float  # analytic multiply-adds per token at S (a layer: at most its widest)
    flops_mean: float  # ... at the mean span over the dev split (the paper's #FLOPS)
    flops_max: float  # ... at each layer's widest window over the dev split
    flops_position: float  # the relative-position term q.p at each layer's window: not #FLOPS
    flops_counted: float | None  # fvcore, one prediction step (cache re-projection excluded)
    flops_executed: float | None  # fvcore, the whole executed step
    flops_cache_reprojection: float | None  # K and V of the cached states, projected again
    flops_error: str | None  # why counting failed (the three above are then None)
    mean_span: float
    layer_max_span: list[int]  # per layer, the window it computes
    head_spans: list[list[float]]  # per layer, per head, z + R capped at S
    floor_bpc: float | None  # the lowest bpc reachable with this model's reach; None: real text
    probe_bpc: dict[str, float]  # per target set of the corpus (`rest` too): dev bpc on it
    probe_bpc_test: dict[str, float]  # ... test bpc on it: what claims score (dev chose best.pt)
    probe_floor: dict[str, float | None]  # ... the lowest reachable at this reach (None: unknown)
    entropy_rate: float | None  # the synthetic corpus's entropy rate (its floor at any reach)
    prefix: bool  # trained on a prefix of the dataset: not comparable with full-dataset bpc
    layer: dict[str, Any]  # what the attention layer is: Attention.describe()
    mixing: list[dict[str, list[list[float]]]]  # per layer, the talking-heads P_l, P_w present
    dynamic_trace: SpanTrace | None  # None for models without a dynamic span
    history: list[Evaluation]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> "RunResult":
        """Parse and type-check a result.json (pydantic.ValidationError when it is not one)."""
        return _ADAPTER.validate_json(text)

    @classmethod
    def from_dict(cls, obj: dict) -> "RunResult":
        """Type-check a parsed result.json (e.g. from mlflow.artifacts.load_dict)."""
        return _ADAPTER.validate_python(obj)

    @classmethod
    def load(cls, path: Path) -> "RunResult":
        return cls.from_json(path.read_bytes())


_ADAPTER = TypeAdapter(RunResult)
