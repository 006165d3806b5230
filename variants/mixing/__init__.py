"""Head-mixing policies: none, logits (P_l), weights (P_w), both (talking heads), dynamic
(talking heads with dynamic projections), gbma."""

from .dynamic import DynamicTalkingHeads
from .gbma import GBMA
from .multihead import MultiHead
from .talking import HeadMix

POLICIES = ("none", "logits", "weights", "both", "dynamic", "gbma")

__all__ = ["GBMA", "POLICIES", "DynamicTalkingHeads", "HeadMix", "MultiHead"]
