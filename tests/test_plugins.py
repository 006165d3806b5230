"""Plugins and typed options: a user's variant in their own file works in all five commands;
a bad plugin or a badly typed option is a user error (exit 2, named, no traceback) caught before
anything runs: no Ray, no MLflow store, no run folder.

The end-to-end test is slow (a real Ray sweep); the error tests run the commands in-process.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

import variants
from bench import flops, plugins, report, run, speed, train
from bench.config import ConfigError, parse_sets, resolve
from bench.experiment.open import GridText, Overrides, load_grid, open_grid
from bench.sweep.plan import plan_table
from bench.sweep.trials import resolve_trials
from bench.training.loop import train as train_run
from tests.limits import HANG

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "examples" / "smoke.yaml"
PLUGIN = ROOT / "examples" / "decay_plugin.py"
DECAY = ROOT / "examples" / "decay.yaml"  # the plugin's grid: decay beside talking-heads
QUICK = ["--preset", "smoke", *[a for s in ["model.n_layers=1", "train.steps=4",
                                             "train.eval_every=4", "train.eval_tokens=500",
                                             "train.warmup=2", "data.n_chars=20000"]
                               for a in ("--set", s)]]  # a bench.train run of seconds


def grid_file(tmp: Path, **changes) -> Path:
    grid = {**yaml.safe_load(SMOKE.read_text()), "name": "plug", **changes}
    path = tmp / "plug.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


# --- bad plugins: exit 2 from every command, the plugin and its error's last line named -------

BAD_PLUGINS = {
    "module not found": ("no_such_attnbench_plugin", "No module named 'no_such_attnbench_plugin'"),
    "file not found": ("{tmp}/absent.py", "FileNotFoundError: no such file"),
    "raises on import": ("{tmp}/broken.py", "RuntimeError: tau table missing"),
    "syntax error": ("{tmp}/syntax.py", "SyntaxError: "),
}


def commands(tmp: Path) -> dict:
    """Each command with arguments that would do real work if the plugins loaded."""
    grid = grid_file(tmp)
    return {
        "bench.train": lambda: train.main(["--no-progress", "--out", str(tmp / "run"),
                                           *QUICK]),
        "bench.run": lambda: run.main([str(grid), "--results-dir", str(tmp / "results")]),
        "bench.speed": lambda: speed.main(["--spans", "32", "--heads", "2", "--repeats", "1"]),
        "bench.flops": lambda: flops.main(["--config", "tiny"]),
        "bench.report": lambda: report.main([str(grid), "--tracking-uri",
                                             f"sqlite:///{tmp / 'results' / 'mlflow.db'}"]),
    }


@pytest.mark.parametrize("case", BAD_PLUGINS, ids=list(BAD_PLUGINS))
@pytest.mark.parametrize("command", ["bench.train", "bench.run", "bench.speed", "bench.flops",
                                     "bench.report"])
def test_bad_plugin_exits_2_in_every_command(case, command, clean, tmp_path, monkeypatch,
                                             capsys):
    (tmp_path / "broken.py").write_text("import math\nraise RuntimeError('tau table missing')\n")
    (tmp_path / "syntax.py").write_text("def decay(:\n")
    plugin, last_line = BAD_PLUGINS[case]
    plugin = plugin.format(tmp=tmp_path)
    monkeypatch.setenv(plugins.ENV, f"{plugin}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(speed, "run", lambda *a: pytest.fail("timed with a broken plugin"))
    assert commands(tmp_path)[command]() == 2
    err = capsys.readouterr().err
    assert f"plugin '{plugin}' failed to import" in err and last_line in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not any((tmp_path / p).exists() for p in ("results", "run", "tmp"))
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_bad_plugin_in_a_grid_file_exits_2(clean, tmp_path, capsys):
    grid = grid_file(tmp_path, plugins=[str(PLUGIN), "no_such_attnbench_plugin"])
    store = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    assert run.main([str(grid), "--results-dir", str(tmp_path / "results")]) == 2
    assert report.main([str(grid), "--tracking-uri", store]) == 2
    err = capsys.readouterr().err
    assert err.count("plugin 'no_such_attnbench_plugin' failed to import: ModuleNotFoundError") == 2
    assert "Traceback" not in err and not (tmp_path / "results").exists()


def test_plugin_loads_once_from_env_and_grid(clean, monkeypatch, tmp_path):
    """The same file named twice (relative in the env, absolute in a grid) is imported once:
    registering `decay` twice would raise."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(plugins.ENV, " examples/decay_plugin.py , ")
    assert plugins.load([str(PLUGIN)]) == [str(PLUGIN)]
    assert plugins.load() == [str(PLUGIN)] and "decay" in variants.names()
    listed = open_grid(grid_file(tmp_path, plugins=["a", "b.py"]), imports=False).plugins
    assert listed == ["a", str((tmp_path / "b.py").resolve())]  # a file: beside the grid file


def test_a_plugin_file_is_found_beside_its_grid_file_or_named_as_resolved(clean, tmp_path,
                                                                          monkeypatch, capsys):
    """`plugins:` paths are relative to the grid file, wherever the command runs; one that does
    not exist exits 2 before anything runs, naming the path as resolved."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    grid = grid_file(tmp_path / "sub", plugins=["../absent.py"])
    assert run.main([str(grid), "--dry-run"]) == 2
    absent = (tmp_path / "absent.py").resolve()
    err = capsys.readouterr().err
    assert f"plugin '{absent}' failed to import: FileNotFoundError: no such file: {absent}" in err
    assert run.main([str(DECAY), "--dry-run"]) == 0  # decay_plugin.py, beside it, not here
    assert "decay" in variants.names()


# --- a plugin's cost: what its mask computes ----------------------------------------------

HARD_WINDOW = """
from dataclasses import dataclass

import variants
from variants import Shape, option
from variants.span import SpanPolicy


class HardWindow(SpanPolicy):
    @dataclass(frozen=True)
    class Options:
        keep: int = option(8, "distances kept: 0..keep-1")

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        self.keep = options.keep

    def mask(self, dist, pos):
        return (dist < self.keep).to(dist.dtype)


variants.register("hard-window", span_policy=HardWindow)
"""


PAST_ONLY = HARD_WINDOW.replace("(dist < self.keep)", "((dist >= 1) & (dist < self.keep))"
                                ).replace('"hard-window"', '"past-only"')  # distances 1..7


def test_a_mask_that_leaves_a_query_no_key_is_refused_when_registered(clean, tmp_path, capsys,
                                                                      monkeypatch):
    """A mask that drops distance 0 leaves a stream's first query (every batch row's, every
    evaluation stream's) without a key: its softmax row is empty and the loss NaN at step 1.
    bench.train refuses it when the plugin registers the variant: exit 2, one line naming the
    variant and the distance, before anything is built or trained. A mask reading positions
    that drops distance 0 at some of them is refused naming the first such position."""
    (tmp_path / "past.py").write_text(PAST_ONLY)
    monkeypatch.setenv(plugins.ENV, str(tmp_path / "past.py"))
    code = train.main(["--no-progress", "--variant", "past-only", "--out", str(tmp_path / "run"),
                       *QUICK])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "variant 'past-only': span_policy=HardWindow: its mask keeps nothing at distance 0 " \
        "(every head, every query)" in err, err
    assert not (tmp_path / "run").exists()

    class OddSelf(variants.span.SpanPolicy):  # itself only at even text positions
        def mask(self, dist, pos):
            return ((dist > 0) | (pos % 2 == 0)).float()

    with pytest.raises(ValueError, match=r"variant 'odd-self': .*distance 0 \(every head, the "
                       r"query at text position 1\)"):
        variants.register("odd-self", span_policy=OddSelf)
    assert "odd-self" not in variants.names()


def test_options_that_leave_a_query_no_key_exit_2_before_anything_runs(clean, tmp_path,
                                                                       capsys):
    """A mask whose options drop distance 0 (keep = 0 here, which the plugin does not check)
    passes registration at its defaults; bench.run builds every model before Ray or MLflow
    start, so the grid that sets it exits 2 with one line naming the trial and the distance."""
    (tmp_path / "hard.py").write_text(HARD_WINDOW)
    grid = grid_file(tmp_path, plugins=["hard.py"], grid={"model.variant": ["hard-window"]})
    code = run.main([str(grid), "--set", "model.attn.keep=0", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "its mask keeps nothing at distance 0 (every head, every query)" in err, err


def test_a_mask_only_plugin_reports_the_span_and_flops_its_mask_computes(clean, tmp_path):
    """A plugin that says only its mask (distances 0..7 in every head) under the tiny preset's
    S = 256 trains and reports mean span 8, windows of 8 and #FLOPS by hand (SPEC section 6:
    L (4 D^2 + 2 D F + 2 D s) multiply-adds per token, s the span computed), not the fixed
    window's, at S too (`flops_full`: what the layer computes at most); fvcore's count of the
    executed step adds the output layer and q.p at s = 8."""
    (tmp_path / "hard.py").write_text(HARD_WINDOW)
    plugins.load([str(tmp_path / "hard.py")])
    cfg = resolve(parse_sets(["model.variant=hard-window", "train.steps=2", "train.block=64",
                              "train.batch_size=2", "train.eval_tokens=600",
                              "data.n_chars=30000"]), preset="tiny")
    m = cfg.model
    assert (m.d_model, m.n_layers, m.d_ff, m.span) == (128, 4, 512, 256)
    result = train_run(cfg, tmp_path / "run", progress=False)
    D, L, F, s, V = 128, 4, 512, 8, cfg.corpus().vocab_size
    assert result.mean_span == s and result.layer_max_span == [s] * L
    assert result.flops_mean == result.flops_max == result.flops_full == L * (
        4 * D**2 + 2 * D * F + 2 * D * s) == 794_624
    assert result.flops_position == L * D * s
    assert result.flops_counted == 794_624 + L * D * s + D * V
    corpus = cfg.corpus()  # its floors at its own reach, L (s - 1) + 1 symbols, not S's
    assert result.floor_bpc == corpus.floor_bpc(L * (s - 1) + 1) > corpus.floor_bpc(L * 255 + 1)
    assert result.probe_floor == corpus.target_floors(L * (s - 1) + 1)


def test_the_layer_the_dry_run_and_the_record_say_one_cost(clean, tmp_path):
    """One set of costs: a mask keeping distances 0..7 of a 64 window costs 8 keys however it is
    asked. Its layer's flops(64) is flops(8) (D = 32: 4 D^2 + 2 D 8 = 4608, not the fixed
    window's 8192); the dry run's FLOPs column and the run's flops_full and flops_max say the
    model's sum of it."""
    (tmp_path / "hard.py").write_text(HARD_WINDOW)
    plugins.load([str(tmp_path / "hard.py")])
    layer = variants.build("hard-window", d_model=32, n_heads=4, span=64)
    fixed = variants.build("fixed", d_model=32, n_heads=4, span=64)
    assert fixed.flops(64) == 8192 and layer.flops(64) == layer.flops(8) == 4608
    assert layer.flops(64, position=True) == layer.flops(8, position=True)
    sets = ["model.d_model=32", "model.n_heads=4", "model.span=64", "model.n_layers=1",
            "model.d_ff=64", "train.steps=2", "train.block=32", "train.batch_size=2",
            "train.eval_tokens=300", "data.n_chars=20000"]
    cfg = resolve(parse_sets([*sets, "model.variant=hard-window"]), preset="smoke")
    result = train_run(cfg, tmp_path / "run", progress=False)
    grid = grid_file(tmp_path, plugins=["hard.py"], grid={"model.variant": ["hard-window"]})
    trials = resolve_trials(open_grid(grid, Overrides(parse_sets(sets))), dry_run=True)
    planned = plan_table(trials)["flops/token"].tolist()
    assert planned == [result.flops_full] == [result.flops_max] == [4608 + 2 * 32 * 64]


# --- typed options ----------------------------------------------------------------------------

def test_options_are_converted_by_the_types_their_classes_declare(clean):
    plugins.load([str(PLUGIN)])
    cfg = resolve(parse_sets(["model.variant=adaptive", "model.attn.span_loss=2e-6",
                              "model.attn.ramp=16", "data.distances=[8,24]",
                              "data.distance_probs=[0.5,0.5]"]))
    assert cfg.model.attn == {"span_loss": 2e-6, "ramp": 16.0}
    assert type(cfg.model.attn["ramp"]) is float and cfg.data.options["distances"] == (8, 24)
    cfg = resolve(parse_sets(["model.variant=decay", "model.attn.tau_init=8",
                              "model.attn.mixing=logits"]))
    assert cfg.model.attn == {"tau_init": 8.0, "mixing": "logits"}


BAD_OPTIONS = {  # grid base changes -> what the error line must say (variant talking-heads,
    # or the one named: an option of another variant's part is unknown to talking heads)
    "lambda not a number": ({"model": {"attn": {"span_loss": "2e-6x"}}},
                            "model.attn.span_loss='2e-6x': expected float", "adaptive"),
    "ramp a word": ({"model": {"attn": {"ramp": "wide"}}},
                    "model.attn.ramp='wide': expected float", "dynamic-span"),
    "chunk a float": ({"model": {"attn": {"chunk": 2.5}}},
                      "model.attn.chunk=2.5: expected int | None", "talking-heads"),
    "trim not a bool": ({"model": {"attn": {"trim": "maybe"}}},
                        "model.attn.trim='maybe': expected bool", "adaptive"),
    "unknown option": ({"model": {"attn": {"tau": 3}}},
                       "model.attn.tau=3: unknown option of variant 'talking-heads'",
                       "talking-heads"),
    "span option on a fixed span": ({"model": {"attn": {"trim_step": 32}}},
                                    "model.attn.trim_step=32: unknown option of variant "
                                    "'talking-heads'", "talking-heads"),
    "plugin option": ({"model": {"attn": {"tau_init": "long"}}},
                      "model.attn.tau_init='long': expected float", "decay"),
    "plugin option on another variant": ({"model": {"attn": {"tau_init": 8}}},
                                         "model.attn.tau_init=8: unknown option",
                                         "talking-heads"),
    "synthetic n_chars": ({"data": {"n_chars": "lots"}}, "data.n_chars='lots': expected int",
                          "talking-heads"),
    "synthetic distances": ({"data": {"distances": [4, "far"]}},
                            "data.distances=[4, 'far']: expected tuple[int, ...]",
                            "talking-heads"),
}


@pytest.mark.parametrize("case", BAD_OPTIONS, ids=list(BAD_OPTIONS))
def test_bad_option_exits_2_before_ray_and_mlflow(case, clean, tmp_path, monkeypatch, capsys):
    """A bad option from a grid file and from `--set` exits 2 with the same line, before Ray,
    MLflow or a run folder; from Python (`variants.build`) it raises that line, less its
    path: one validator, one format."""
    changes, line, variant = BAD_OPTIONS[case]
    base = yaml.safe_load(SMOKE.read_text())["base"]
    for section, values in changes.items():
        base[section] = {**base.get(section, {}), **values}
    grid = grid_file(tmp_path, base=base, grid={"model.variant": [variant]},
                     plugins=[str(PLUGIN)])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert run.main([str(grid), "--results-dir", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert line in err and "Traceback" not in err, err
    assert not (tmp_path / "results").exists() and not (tmp_path / "tmp").exists()
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    sets = [f"{'.'.join(k)}={v}" for k, v in _leaves(changes)]  # the same through bench.train
    assert train.main(["--variant", variant, "--out", str(tmp_path / "run"),
                       *[a for s in sets for a in ("--set", s)]]) == 2
    assert line in capsys.readouterr().err and not (tmp_path / "run").exists()
    if "attn" in changes.get("model", {}):  # the same line from Python, less its path
        with pytest.raises(variants.OptionError) as err:
            variants.build(variant, d_model=32, n_heads=2, span=32, **changes["model"]["attn"])
        assert line.removeprefix("model.attn.") in str(err.value), str(err.value)


def _leaves(tree: dict, path: tuple = ()) -> list[tuple[tuple, object]]:
    out = []
    for k, v in tree.items():
        out += _leaves(v, (*path, k)) if isinstance(v, dict) else [((*path, k), v)]
    return out


def test_bad_option_via_resolve_names_every_bad_key(clean):
    with pytest.raises(ConfigError) as err:
        resolve(parse_sets(["model.attn.ramp=wide", "model.attn.h=two"]))
    assert "model.attn.ramp='wide'" in str(err.value) and "model.attn.h='two'" in str(err.value)


# --- the plugin through all five commands (slow: a real Ray sweep) ---------------------------

def cli(module: str, *args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def decay_sweep(made_store):
    """examples/decay.yaml through Ray once, from another directory (its plugin found beside
    it, named by the grid's `plugins:` list alone: no ATTNBENCH_PLUGINS), with an override and
    --seed-start, then `bench.report decay` by name on its store: (folder, the sweep's output,
    the report's), what both tests below read."""
    with tempfile.TemporaryDirectory(prefix="ab", dir="/tmp") as d:
        tmp = Path(d)
        env = {k: v for k, v in os.environ.items()
               if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", plugins.ENV)}
        env |= {"TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
        (tmp / "results").mkdir()
        shutil.copyfile(made_store, tmp / "results" / "mlflow.db")
        swept = cli("bench.run", str(DECAY), "--set", "train.steps=10", "--seed-start", "3",
                    "--results-dir", str(tmp / "results"), "--no-report", env=env,
                    cwd=tmp).stdout
        store = f"sqlite:///{tmp / 'results' / 'mlflow.db'}"
        reported = cli("bench.report", "decay", "--tracking-uri", store, "--out",
                       str(tmp / "report"), env=env, cwd=tmp).stdout
        yield tmp, swept, reported


@pytest.mark.slow
def test_plugin_through_all_five_commands(decay_sweep):
    """examples/decay_plugin.py, never imported by the package: bench.train and bench.speed
    and bench.flops get it from ATTNBENCH_PLUGINS; bench.run from the grid's `plugins:` list
    only (so its Ray trial imports it from the trial it is handed: `decay_sweep`), then
    bench.report on that grid."""
    tmp, swept, reported = decay_sweep
    assert "decay-s3: FINISHED" in swept, swept
    assert "wrote" in reported and "| decay " in (tmp / "report" / "generic.md").read_text()
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", plugins.ENV)}
    env |= {"TMPDIR": str(tmp), "PYTHONPATH": str(ROOT),
            plugins.ENV: str(PLUGIN.relative_to(ROOT))}

    out = cli("bench.train", "--variant", "decay", "--set", "model.attn.tau_init=8",
              "--out", str(tmp / "run"), "--no-progress", *QUICK, env=env, cwd=ROOT).stdout
    assert "dev bpc" in out and (tmp / "run" / "result.json").exists()

    out = cli("bench.speed", "--variants", "decay:tau_init=8", "--spans", "32", "--heads",
              "2", "--repeats", "1", "--set", "model.d_model=32", "--set",
              "model.n_layers=1", "--set", "train.block=32", "--set", "train.batch_size=2",
              env=env, cwd=ROOT).stdout
    assert "| decay:tau_init=8 " in out, out

    out = cli("bench.flops", "--config", "tiny", env=env, cwd=ROOT).stdout
    row = next(line for line in out.splitlines() if "| decay " in line)
    assert row.split("|")[-3].strip() == "+0.0000", row  # counted = analytic


@pytest.mark.slow
def test_the_decay_grid_runs_beside_its_baseline_and_its_plan_is_what_the_store_holds(
        clean, decay_sweep):
    """examples/decay.yaml through Ray from another directory (its plugin found beside it),
    with an override and --seed-start (`decay_sweep`): both rows finish; the grid logged with
    the sweep is the plan that ran (the override, the seeds, the plugin's absolute path), and
    `bench.report decay`, by name, rebuilds exactly it and imports the plugin it names."""
    tmp, swept, _ = decay_sweep
    assert "talking-heads-s3: FINISHED" in swept and "decay-s3: FINISHED" in swept, swept
    table = (tmp / "report" / "generic.md").read_text()
    assert "| decay " in table and "| talking-heads " in table, table
    plan = open_grid(DECAY, Overrides(parse_sets(["train.steps=10"]), seed_start=3))
    logged = load_grid(GridText((tmp / "report" / "grid.yaml").read_text(), "logged", tmp))
    assert logged == plan and logged.seeds == [3] and logged.plugins == [str(PLUGIN)]


@pytest.mark.parametrize("keep", [8, 48])
def test_a_variant_that_cannot_reach_the_probe_is_refused_before_anything_runs(
        clean, tmp_path, capsys, keep):
    """The main job's recall probe (episodes of 33 symbols, span 32) against a mask plugin that
    keeps `keep` distances: with 8 the dry run exits 2 naming the variant, the window its mask
    keeps and the window an episode needs, before any trial; with 48 the plan is printed."""
    (tmp_path / "hard.py").write_text(HARD_WINDOW)
    grid = yaml.safe_load((ROOT / "ablations" / "heads_grid.yaml").read_text())
    grid["base"]["model"]["attn"] = {"keep": keep}
    grid["base"]["model"]["span"] = 64
    grid |= {"name": "reach", "plugins": ["hard.py"], "status": "pilot", "of": "heads_grid",
             "grid": {"model.variant": ["hard-window"]}, "seeds": [0], "claims": [],
             "design_seeds": []}
    (tmp_path / "reach.yaml").write_text(yaml.safe_dump(grid))
    code = run.main([str(tmp_path / "reach.yaml"), "--dry-run"])
    said = capsys.readouterr()
    if keep == 8:
        assert code == 2, said.out[-2000:]
        assert ("variant 'hard-window''s span policy keeps at most 8 (its mask), so it can never "
                "learn the probe") in said.err and "needs one head's window of" in said.err
    else:
        assert code == 0, said.err


def test_an_option_check_that_needs_the_window_exits_2_before_anything_runs(clean, tmp_path,
                                                                           capsys):
    """ablations/window.py refuses keep > S in its constructor, where the Shape is known:
    bench.run builds each model before Ray or MLflow start, so keep=100 at S = 64 exits 2 with
    one line naming model.attn.keep, and no results folder or store exists."""
    shutil.copy(ROOT / "ablations" / "window.py", tmp_path)
    grid = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    grid |= {"name": "keep", "plugins": ["window.py"],
             "grid": {"model.variant": ["fixed", "window"]}}
    grid["base"]["model"] = {"span": 64, "attn": {"keep": 100}}
    (tmp_path / "keep.yaml").write_text(yaml.safe_dump(grid))
    code = run.main([str(tmp_path / "keep.yaml"), "--results-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "model.attn.keep=100: expected 1 to the span S = 64" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r").exists()
