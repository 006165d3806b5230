"""Head-mixing policies: none, logits (P_l), weights (P_w), both (talking heads),
dynamic-projections (talking heads with dynamic projections), gbma."""

from .base import MixingPolicy, Shape
from .dynamic_projections import DynamicTalkingHeads
from .gbma import GBMA
from .multihead import MultiHead
from .talking import INITS, HeadMix, TalkingHeads

# name -> (class, the constructor arguments the name fixes)
POLICIES = {"none": (MultiHead, {}),
            "logits": (TalkingHeads, {"mix_logits": True, "mix_weights": False}),
            "weights": (TalkingHeads, {"mix_logits": False, "mix_weights": True}),
            "both": (TalkingHeads, {"mix_logits": True, "mix_weights": True}),
            "dynamic-projections": (DynamicTalkingHeads, {}), "gbma": (GBMA, {})}

__all__ = ["GBMA", "INITS", "POLICIES", "DynamicTalkingHeads", "HeadMix", "MixingPolicy",
           "MultiHead", "Shape", "TalkingHeads"]
