"""Head-mixing policies: none, logits (P_l), weights (P_w), both (talking heads), dynamic
(talking heads with dynamic projections), gbma."""

from .base import MixingPolicy
from .dynamic import DynamicTalkingHeads
from .gbma import GBMA
from .multihead import MultiHead
from .talking import INITS, HeadMix

# name -> (class, the options the name fixes)
POLICIES = {"none": (MultiHead, {}), "logits": (MultiHead, {"mix_logits": True}),
            "weights": (MultiHead, {"mix_weights": True}),
            "both": (MultiHead, {"mix_logits": True, "mix_weights": True}),
            "dynamic": (DynamicTalkingHeads, {}), "gbma": (GBMA, {})}

__all__ = ["GBMA", "INITS", "POLICIES", "DynamicTalkingHeads", "HeadMix", "MixingPolicy",
           "MultiHead"]
