"""Head-mixing policies: none, logits (P_l), weights (P_w), both (talking heads),
dynamic-projections (talking heads with dynamic projections; alias: dynamic), gbma."""

from .base import MixingPolicy
from .dynamic import DynamicTalkingHeads
from .gbma import GBMA
from .multihead import MultiHead, TalkingHeads
from .talking import INITS, HeadMix

# name -> (class, the constructor arguments the name fixes); `dynamic`, the first name of
# dynamic-projections (and what its layer reports), is kept as an alias
POLICIES = {"none": (MultiHead, {}),
            "logits": (TalkingHeads, {"mix_logits": True, "mix_weights": False}),
            "weights": (TalkingHeads, {"mix_logits": False, "mix_weights": True}),
            "both": (TalkingHeads, {"mix_logits": True, "mix_weights": True}),
            "dynamic-projections": (DynamicTalkingHeads, {}), "dynamic": (DynamicTalkingHeads, {}),
            "gbma": (GBMA, {})}

__all__ = ["GBMA", "INITS", "POLICIES", "DynamicTalkingHeads", "HeadMix", "MixingPolicy",
           "MultiHead", "TalkingHeads"]
