"""Head-mixing policies: none, logits (P_l), weights (P_w), both (talking heads),
dynamic-projections (talking heads with dynamic projections), gbma."""

from .base import Heads, MixingPolicy, Shape
from .dynamic_projections import DynamicTalkingHeads
from .gbma import GBMA
from .multihead import MultiHead
from .talking import INITS, HeadMix, TalkingHeads

__all__ = ["GBMA", "INITS", "DynamicTalkingHeads", "Heads", "HeadMix", "MixingPolicy",
           "MultiHead", "Shape", "TalkingHeads"]
