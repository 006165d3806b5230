"""What one run is and where it stands: its fixed parts (`TrainingSetup`: config, corpus, model,
device, precision, folder) and its progress (`LoopState`, saved in every checkpoint)."""

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench import data
from bench.config import Config
from bench.model import TransformerLM
from bench.record import Evaluation

from .evaluate import Reading


@dataclass(frozen=True)
class TrainingSetup:
    """One run's fixed parts: its resolved config, corpus, model (on `device`), whether it
    trains in bf16 autocast (`amp`) and its folder."""

    cfg: Config
    corpus: data.Corpus
    model: TransformerLM
    device: torch.device
    amp: bool
    out_dir: Path

    @property
    def reading(self) -> Reading:
        """How the run's evaluations read a split."""
        t = self.cfg.train
        return Reading(t.eval_batch_size or t.batch_size, t.block, self.device, self.amp)


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass
class LoopState:
    """Where a run is, saved in every checkpoint: optimiser steps taken, the data position, the
    tokens and seconds trained, the best dev bpc so far and the evaluations since it improved
    (for `train.patience`), each step's loss and each evaluation."""

    step: int = 0
    pos: int = 0
    tokens: int = 0
    train_time: float = 0.0
    best_dev: float = math.inf
    bad_evals: int = 0
    losses: list[float] = field(default_factory=list)
    history: list[Evaluation] = field(default_factory=list)

    def advance(self, pos: int, tokens: int) -> None:
        """Count one step that read up to `pos`."""
        self.step += 1
        self.pos = pos
        self.tokens += tokens

    def record(self, losses: list[float], seconds: float) -> None:
        """The losses of the steps since the last record, which took `seconds`; Diverged at the
        first loss that is not finite."""
        for i, loss in enumerate(losses):
            if not math.isfinite(loss):
                raise Diverged(f"training loss is {loss} at step {self.step - len(losses) + i + 1}")
        self.train_time += seconds
        self.losses.extend(losses)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.train_time, 1e-9)
