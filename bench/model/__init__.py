"""The model room: the transformer body every variant shares, built from its config (as
nanoGPT's GPT(GPTConfig) or timm's create_model), with paired initialisation, and what it costs
(analytic #FLOPS, parameters; FLOPs counted by fvcore). Imports variants and the run schema
(`bench.config`), nothing else of bench.
"""

from bench.config import ModelConfig

from .body import TransformerLM
from .pairing import build_paired


def create_model(m: ModelConfig, vocab_size: int, seed: int | None = None) -> TransformerLM:
    """The model `m` describes, over `vocab_size` symbols; with `seed`, every randomly
    initialised parameter is drawn per (seed, name, shape), so variants compare as pairs
    (`build_paired`)."""
    def build() -> TransformerLM:
        return TransformerLM(m, vocab_size)

    return build() if seed is None else build_paired(build, seed)


__all__ = ["TransformerLM", "build_paired", "create_model"]
