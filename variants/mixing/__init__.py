"""Head-mixing policies: none, logits (P_l), weights (P_w), both (talking heads), gbma."""

from .gbma import GBMA
from .multihead import MultiHead
from .talking import INITS, HeadMix

POLICIES = ("none", "logits", "weights", "both", "gbma")

__all__ = ["GBMA", "INITS", "POLICIES", "HeadMix", "MultiHead"]
