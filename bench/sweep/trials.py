"""What a grid expands to (opened with the command line's overrides applied,
`bench.experiment.open`): the trials (cross product minus `exclude`, times seeds), each built
whole by `resolve_trials` as the one `bench.trial.Trial` the plan, Ray's worker and the MLflow
writer share: its validated config and its identity (the config, what its corpus is, the
precision it runs in, the grid's plugins' code), its vocabulary and the probes its corpus
scores, and what the sweep gives each trial (its folder, threads, plugins, the plan it serves).

Nothing here starts Ray or MLflow: the runner runs what this module resolves.
"""

import hashlib
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import variants
from bench import codehash, data, plugins, provenance
from bench.config import (
    Config,
    ConfigError,
    DataConfig,
    corpus_options,
    drop_untaken,
    merge,
    resolve,
    set_dotted,
    untaken,
)
from bench.experiment.grid import Grid, excluded, seed_list
from bench.experiment.layouts import display_name
from bench.experiment.open import SECTIONS
from bench.model import create_model
from bench.training import precision
from bench.trial import Served, Trial, trial_name

# Options added after trials were recorded, at the value that trains as the code before them
# did: left out of a config's identity at that value, so every earlier trial keeps its hash.
ADDED = {("train", "schedule"): "constant"}


def _sha256_json(tree: dict) -> str:
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _identity_tree(cfg: Config) -> dict:
    """The resolved config as JSON, without the `ADDED` options left at their old behaviour."""
    tree = cfg.model_dump(mode="json")
    for (section, key), value in ADDED.items():
        if tree[section][key] == value:
            del tree[section][key]
    return tree


def config_hash(cfg: Config) -> str:
    """sha256 of the canonical JSON of a resolved config (the seed is train.seed)."""
    return _sha256_json(_identity_tree(cfg))


def trial_hash(cfg: Config, identity: dict | None, precision_name: str,
               plugin_code: Sequence[str] = ()) -> str:
    """A trial's identity: the config's hash with its data section replaced by what the data is
    (`Corpus.identity()`: name, sha256, split sizes), so the same trial has the same identity in
    every checkout and on every machine, and other bytes under the same path do not; and the
    precision it runs in (train.amp resolved: `auto` is bf16 on one machine, fp32 on another),
    so a rerun elsewhere never reuses or averages with runs of the other precision. The worker
    refuses a trial whose precision it would resolve otherwise (`train(precision=...)`), so the
    identity is always what ran. None (a dry run that downloads nothing) hashes the data
    section as written. `plugin_code`: the digests of the grid's plugin files as code
    (`plugin_digests`), in its order, so that a plugin edited between two sweeps makes new
    trials, never finished ones reused; none (a grid without plugins, or a trial recorded
    before trials recorded their code, code_sha) leaves the identity as it was."""
    tree = _identity_tree(cfg)
    if identity is not None:
        tree["data"] = identity
    return _sha256_json({**tree, "precision": precision_name,
                         **({"plugins": list(plugin_code)} if plugin_code else {})})


def own_plugins(listed: Sequence[str]) -> list[Path]:
    """The files of the plugins a grid file lists, in its order (`listed`: its plugins as
    `open_grid` gives them), $ATTNBENCH_PLUGINS' aside: the environment's plugins (a test's
    hold, a user's tooling) are not the grid's."""
    env = set(plugins.absolute(plugins.from_env()))
    return codehash.plugin_files(p for p in listed if p not in env)


def plugin_digests(listed: Sequence[str]) -> list[str]:
    """The digest of each of the grid's own plugin files as code (`own_plugins`,
    `bench.codehash.digest`), in its order."""
    return [codehash.digest(p.read_bytes()) for p in own_plugins(listed)]


def resolved_precision(cfg: Config) -> str:
    """The precision the trial runs in on this machine's device (ConfigError: no such device)."""
    try:
        device = provenance.device(cfg.train.device)
    except ValueError as err:
        raise ConfigError(f"train.device: {err}") from None
    return precision.name(precision.resolve(cfg.train.amp, device))


def trial_tree(values: dict[str, Any], seed: int, base: dict) -> dict:
    """One trial's config tree: base, then its grid values and seed."""
    tree: dict = {}
    for key, value in values.items():
        set_dotted(tree, key, value)
    tree = merge(base, tree)
    set_dotted(tree, "train.seed", seed)
    return tree


def trial_config(values: dict[str, Any], seed: int, base: dict, preset: str | None,
                 refused: set[str] = frozenset()) -> tuple[Config, list[str]]:
    """One trial's resolved config (paths absolute) and the model.attn options it drops because
    its variant does not take them; those in `refused` are kept, for resolve() to refuse."""
    tree = trial_tree(values, seed, base)
    ignored = drop_untaken(tree, preset, keep=refused)
    try:
        cfg = resolve(tree, preset)
    except ConfigError as err:
        label = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise ConfigError(f"trial {label}, seed {seed}: {err}") from None
    for key, value in cfg.data.options.items():  # trials run in other working directories
        if isinstance(value, Path):
            setattr(cfg.data, key, value.expanduser().resolve())
    return cfg, ignored


def base_of(grid: Grid) -> tuple[dict, str | None]:
    """The grid's base config tree, by section, and its preset."""
    return {k: getattr(grid.base, k) for k in SECTIONS}, grid.base.preset


def refused(grid: Grid, combos: list[dict[str, Any]]) -> set[str]:
    """The model.attn options the grid sets that no trial's variant takes (among `combos`, its
    settings): refused by name, where the others are dropped as ignored."""
    base, preset = base_of(grid)
    return set.intersection(*(set(untaken(trial_tree(v, 0, base), preset)) for v in combos))


def expand(grid: Grid) -> list[tuple[dict[str, Any], Config, list[str]]]:
    """Every distinct trial's (grid values, validated config, options dropped as ignored); raises
    ConfigError naming the trial and the key. An option the grid sets for several variants is
    dropped, and recorded as ignored, for the trials whose variant does not take it; one that no
    trial's variant takes is refused."""
    base, preset = base_of(grid)
    combos = [values for combo in itertools.product(*grid.grid.values())
              if not excluded(values := dict(zip(grid.grid, combo, strict=True)), grid.exclude)]
    if not combos:
        raise ConfigError("exclude: every trial of the grid is excluded")
    refusing = refused(grid, combos)
    found: dict[str, tuple] = {}
    for values in combos:
        for seed in seed_list(grid.seeds):
            cfg, ignored = trial_config(values, seed, base, preset, refusing)
            found.setdefault(config_hash(cfg), (values, cfg, ignored))
    return list(found.values())


def run_folder(results_dir: Path, grid: str, out: Path | None = None) -> Path:
    """Where a run of `grid` goes, its results and trials: `out` (bench.run --out; a committed
    run's is results/<experiment>/<run>/, docs/grids.md), else <results_dir>/<grid>/."""
    return (out or results_dir / grid).resolve()


def resolve_trials(grid: Grid, dry_run: bool, *, results_dir: Path = provenance.LOCAL,
                   plan: Served | None = None, out: Path | None = None) -> list[Trial]:
    """The grid's trials (a grid opened under the command line's overrides), each built whole:
    validated, its corpus built once per distinct data section (so a bad data option is a user
    error here, and a download happens once), identified by that corpus, its precision and the
    grid's plugin files as code (`trial_hash`),
    placed in <run folder>/trials/<hash> (`run_folder`: `out`, else <results_dir>/<grid>), and
    given the grid's threads and plugins and `plan`, what it records of the plan it serves
    (None: nothing). A dry run downloads nothing: a corpus not yet downloaded is planned with
    256 symbols and identified by its options."""
    seen: dict[str, tuple] = {}  # data options -> (vocabulary, identity, probes, needs)
    widths: dict[str, int] = {}  # model options -> the widest window a head can ever use
    trials_dir = run_folder(results_dir, grid.name, out) / "trials"
    plugin_code = plugin_digests(grid.plugins)
    trials = []
    for values, cfg, ignored in expand(grid):
        d, tr = cfg.data, cfg.train
        key = json.dumps([d.model_dump(mode="json"), tr.block, tr.batch_size], sort_keys=True)
        if key not in seen:
            seen[key] = _corpus(cfg, dry_run, trial_name(values, cfg))
        vocab, identity, probes, needs = seen[key]
        _check_reach(cfg, vocab, needs, widths, trial_name(values, cfg))
        precision_name = resolved_precision(cfg)
        hashed = trial_hash(cfg, identity, precision_name, plugin_code)
        trials.append(Trial(
            values, cfg, hashed, precision_name, vocab, grid=grid.name,
            out_dir=trials_dir / hashed, threads=max(1, int(grid.resources.cpu)),
            plugins=tuple(grid.plugins), ignored=tuple(ignored), probes=probes,
            identity=identity, plan=plan or Served(),
            shown=display_name(cfg.model.variant, grid.report.table)))
    return trials


def _corpus(cfg: Config, dry_run: bool, name: str) -> tuple[int, dict | None, tuple | None]:
    """(vocabulary size, identity, probes) of a trial's corpus; ConfigError naming the trial."""
    d = cfg.data
    if dry_run and "download" in corpus_options(d.name):
        offline = DataConfig.model_validate({**d.model_dump(), "download": False})
        cfg = cfg.model_copy(update={"data": offline})
    try:
        corpus = cfg.corpus()
        return (corpus.vocab_size, corpus.identity(), tuple(corpus.target_floors()),
                corpus.needs_span())
    except (data.DataError, TypeError) as err:
        if not (dry_run and cfg.data is not d and "no cached copy" in str(err)):
            raise ConfigError(f"trial {name}: data: {err}") from None
        print(f"note: {d.name} is not downloaded yet; the plan assumes 256 symbols")
        return 256, None, None, {}


def _check_reach(cfg: Config, vocab: int, needs: dict[str, int], widths: dict[str, int],
                 name: str) -> None:
    """A ConfigError (exit 2, before anything runs) where the model cannot be built (an
    OptionError its policy raises once it knows its Shape: S, h, d_model), or a probe's episode
    needs a wider window than one head of this model can ever use (its widest layer's
    `Attention.widest`, computed once per model section in `widths`): that variant could never
    learn the probe, so no claim on it can be answered.
    The span limit itself is checked where the corpus is fitted (`data.fitted`)."""
    key = json.dumps(cfg.model.model_dump(mode="json"), sort_keys=True, default=str)
    if key not in widths:  # built once here: a policy's check that needs its Shape runs now
        try:
            model = create_model(cfg.model, vocab)
        except variants.OptionError as err:
            raise ConfigError(f"trial {name}: " + "; ".join(err.lines(
                lambda k: f"model.attn.{k}"))) from None
        widths[key] = max(b.attn.widest for b in model.blocks)
    for option, need in needs.items():
        if widths[key] < need:
            raise ConfigError(
                f"trial {name}: {option}: an episode needs one head's window of {need} "
                f"distances (its last answer back to its delimiter); variant "
                f"{cfg.model.variant!r}'s span policy keeps at most {widths[key]} (its mask), so "
                "it can never learn the probe: widen its window, or drop the variant or the "
                "probe")
