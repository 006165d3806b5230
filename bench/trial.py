"""One trial of a sweep, typed and frozen (`Trial`): built whole once, where the grid expands
(`bench.sweep.trials.resolve_trials`), then planned, packed on GPUs, handed to its Ray worker as
it is and recorded by the MLflow writer, with no other type between them. It sits below the
sweep and the tracking rooms, beside the plugins, and imports the run's schema
(`bench.config`) only, so every room that handles a trial may import it (the table in
pyproject.toml).
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.config import Config


@dataclass(frozen=True)
class Served:
    """What a trial records of the plan it serves (`bench.findings.provenance.plan`): its tags
    (plan_sha, seed_start, plan_file, run_commit, run_clean; none: a plan that records nothing,
    a dry run) and `record`, plan.json's text: the plan itself as registered, logged with the
    trial's run, which the report writes beside runs.csv ("": none)."""

    tags: dict[str, str] = field(default_factory=dict)
    record: str = ""


@dataclass(frozen=True)
class Trial:
    """One trial, finished: its grid values, validated config and identity (`hash`: the
    config, what its corpus is, the precision it runs in and its grid's plugin files as code),
    that precision (train.amp
    resolved here; the worker refuses another), its corpus's vocabulary size and the probes it
    scores apart (None: a dry run that built no corpus), the grid options its variant does not
    take; and what its worker and its MLflow run need of the sweep: the grid's name, its folder
    (the only checkpoint store), torch threads, the plugins to import first, what it records
    of the plan it serves (`Served`) and its variant as the report names
    it (`shown`: `bench.experiment.layouts.display_name`, "multi-head" for `fixed` under a
    talking-heads table), which its run's name and group carry (the registry key stays in the
    config, the run's model.variant param). Ray hands it to the worker as it is
    (`tune.with_parameters`): a Tune config would flatten a dataclass."""

    values: dict[str, Any]  # this trial's value of each grid key, in the grid's order
    cfg: Config
    hash: str
    precision: str
    vocab: int
    grid: str  # the grid's name
    out_dir: Path  # <results-dir>/<grid>/trials/<hash>
    threads: int  # torch threads: the grid's resources.cpu
    plugins: tuple[str, ...]  # the grid's plugins, imported before anything names a variant
    ignored: tuple[str, ...]
    probes: tuple[str, ...] | None
    identity: dict | None  # what its corpus is (`Corpus.identity()`); None: not built
    plan: Served  # Served(): a plan that records nothing (a dry run, a rename)
    shown: str  # its variant as the report names it

    @property
    def seed(self) -> int:
        return self.cfg.train.seed

    @property
    def grid_keys(self) -> tuple[str, ...]:
        """The grid's keys, in the grid's order (the seed aside)."""
        return tuple(self.values)

    @property
    def provisional(self) -> bool:
        """A dry run's trial whose corpus is not downloaded yet: its hash names the corpus by
        its options, where the run's names it by its bytes."""
        return self.identity is None

    @property
    def name(self) -> str:
        """Its run's name: `trial_name` with the variant as the report names it."""
        return trial_name(self.values, self.cfg, self.shown)

    @property
    def setting(self) -> str:
        """Its setting, what its seeds share: `setting_name`."""
        return setting_name(self.values, self.shown)


def setting_name(values: dict[str, Any], variant: str) -> str:
    """<variant>-<varied values>, e.g. talking-heads-n_heads=8: a trial's name without its
    seed, the label of its seeds' group in MLflow's runs table (`variant`: as the report names
    it)."""
    varied = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in values.items() if k != "model.variant"]
    return "-".join([variant, *varied])


def trial_name(values: dict[str, Any], cfg: Config, shown: str | None = None) -> str:
    """<variant>-<varied values>-s<seed>, e.g. talking-heads-n_heads=8-s0 (`shown`: the
    variant as the report names it; default its registry key)."""
    return f"{setting_name(values, shown or cfg.model.variant)}-s{cfg.train.seed}"
