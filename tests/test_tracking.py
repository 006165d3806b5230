"""What a rerun trusts: trial identity, stale results, unreadable checkpoints, the MLflow dataset
of a corpus, and the report's reading of runs from other code. Fast: no Ray."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from mlflow.entities import Param

from bench import data, metrics, provenance
from bench.config import resolve
from bench.experiment.open import open_grid, read_grid_text
from bench.findings.presentation import render as report
from bench.sweep import runner
from bench.sweep.trials import resolve_trials
from bench.tracking import names, page, reader, store, view, writer
from bench.training.checkpoint import load_checkpoint
from bench.training.loop import train
from bench.trial import Served, Trial
from tests.helpers import smoke_trials

ROOT = Path(__file__).resolve().parents[1]


def test_trial_identity_is_the_data_not_its_path(tmp_path):
    """The same bytes under two paths: one identity; other bytes under the same path: another."""
    text = bytes(range(32, 127)) * 400
    a, b = tmp_path / "a" / "corpus.txt", tmp_path / "b" / "copy.txt"
    for f in (a, b):
        f.parent.mkdir()
        f.write_bytes(text)
    at_a = smoke_trials([f"data.path={a}"], "file")
    at_b = smoke_trials([f"data.path={b}"], "file")
    assert [t.hash for t in at_a] == [t.hash for t in at_b]
    assert at_a[0].cfg.data.path != at_b[0].cfg.data.path
    b.write_bytes(text[::-1])
    assert {t.hash for t in smoke_trials([f"data.path={b}"], "file")}.isdisjoint(
        t.hash for t in at_a)


def test_a_trial_is_built_whole_once_and_crosses_to_ray_as_it_is(tmp_path):
    """resolve_trials builds each trial whole, with what the sweep gives it (its folder under
    the results folder, the grid's name, threads and plugins, the plan it serves), and that
    one object is what Ray pickles to the worker and the writer records: equal after the
    crossing, its hash the same."""
    import pickle

    grid = open_grid(ROOT / "examples" / "smoke.yaml")
    plan = Served({"plan_sha": "0" * 64, "run_clean": "true"}, '{"0": {}}')
    trials = resolve_trials(grid, False, results_dir=tmp_path / "results", plan=plan)
    unplaced = smoke_trials([])  # the command line's folder, no plan: the same identities
    assert [t.hash for t in trials] == [t.hash for t in unplaced]
    assert all(t.plan == Served() for t in unplaced)
    for t in trials:
        assert isinstance(t, Trial) and t.grid == grid.name == "smoke"
        assert t.out_dir == (tmp_path / "results").resolve() / "smoke" / "trials" / t.hash
        assert t.grid_keys == tuple(grid.grid) and t.plan == plan
        assert t.threads == max(1, int(grid.resources.cpu))
        assert t.plugins == tuple(grid.plugins)
        crossed = pickle.loads(pickle.dumps(t))
        assert crossed == t and crossed.name == t.name and crossed.hash == t.hash


def test_runs_and_groups_carry_the_reports_names_and_keep_the_registry_key(tmp_path, store_at):
    """Under a talking-heads table, `fixed` is "multi-head" in the report; its trial's MLflow
    run name and group (the chart's bars) say so too, while the run's model.variant param keeps
    the registry key. Without such a table the key is the name."""
    text = (ROOT / "examples" / "smoke.yaml").read_text()
    (tmp_path / "th.yaml").write_text(text + "report: {table: th_table1}\n")
    shown = resolve_trials(open_grid(tmp_path / "th.yaml"), dry_run=False)
    assert [t.setting for t in shown] == ["multi-head", "talking-heads"]
    assert [t.setting for t in smoke_trials([])] == ["fixed", "talking-heads"]
    uri = store_at(tmp_path / "mlflow.db")
    client = store.open_store(uri)
    exp = store.experiment_id(client, "th", uri)
    parent = client.create_run(exp).info.run_id
    run = writer.TrialRun.open(writer.Where(uri, exp, parent, "th.yaml"), shown[0], {})
    logged = client.get_run(run.run_id)
    assert logged.info.run_name == "multi-head-s0" == shown[0].name
    assert logged.data.tags[names.SETTING] == "multi-head"
    assert logged.data.params["model.variant"] == "fixed"


def test_stale_results_name_their_commits(tmp_path, store_at):
    """Finished runs from another commit, or from other uncommitted changes, are stale; the
    current commit's, unfinished ones and runs without a recorded commit are not."""
    uri = store_at(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    exp = store.experiment_id(client, "smoke", uri)
    trials = smoke_trials([])
    now = {"code_version": "code-" + "a" * 12, "git_commit": "a" * 40 + "-dirty.0123abcd"}
    logged = [(trials[0], {"git_commit": "b" * 40}),  # from before code versions: by commit
              (trials[1], {"git_commit": "c" * 40, **now})]  # another commit, the same code
    for t, params in logged:
        r = client.create_run(exp, tags={names.ROLE: "trial", names.HASH: t.hash})
        client.log_batch(r.info.run_id, params=[Param(k, v) for k, v in params.items()])
        client.set_terminated(r.info.run_id, "FINISHED")
    runs = reader.trial_runs(client, exp)
    assert runner.stale_results(trials, runs, now) == {trials[0].hash: "b" * 40}
    other = {"code_version": "code-" + "f" * 12, "git_commit": "b" * 40}
    assert runner.stale_results(trials, runs, other) == {trials[1].hash: now["code_version"]}
    assert reader.stale({}, now) is None
    assert reader.stale({"git_commit": "unknown"}, now) is None


def test_an_unfinished_run_from_other_code_restarts_afresh(tmp_path, store_at):
    """A trial left RUNNING (a killed sweep) by other code is not resumed from its checkpoint,
    which would train one run on two codes; one left by this code is, and a finished one is
    stale, not restarted."""
    uri = store_at(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    exp = store.experiment_id(client, "smoke", uri)
    trials = smoke_trials([])
    now = {"code_version": "code-" + "a" * 12, "git_commit": "a" * 40}
    for t, code in zip(trials, ("code-" + "b" * 12, now["code_version"]), strict=True):
        r = client.create_run(exp, tags={names.ROLE: "trial", names.HASH: t.hash})
        client.log_param(r.info.run_id, "code_version", code)
    runs = reader.trial_runs(client, exp)
    assert runner.restarted(trials, runs, now) == {trials[0].hash}
    client.set_terminated(runs[trials[0].hash][0].info.run_id, "FINISHED")
    runs = reader.trial_runs(client, exp)
    assert runner.restarted(trials, runs, now) == set()
    assert runner.stale_results(trials, runs, now) == {trials[0].hash: "code-" + "b" * 12}


def test_code_version_follows_the_training_code_only(tmp_path, monkeypatch):
    """The same training code, the same version, whatever else differs; one changed byte in it,
    another. RESULT_CODE covers every module of this checkout that the training loop imports."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, bench.training.loop; print(*(m.__file__ for m in "
         "list(sys.modules.values()) if getattr(m, '__file__', None)), sep='\\n')"],
        cwd=provenance.ROOT, capture_output=True, text=True, check=True).stdout.split()
    ours = {Path(f) for f in loaded if Path(f).is_absolute() and Path(f).is_relative_to(
        provenance.ROOT) and ".venv" not in Path(f).parts}
    assert ours and ours <= set(provenance.code_files())
    copy = tmp_path / "checkout"
    for f in [*provenance.code_files(), provenance.ROOT / "README.md"]:
        dest = copy / f.relative_to(provenance.ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(f.read_bytes())
    monkeypatch.setattr(provenance, "ROOT", copy)
    same = provenance.code_version()
    assert same == provenance.code_version() and same.startswith("code-")
    (copy / "README.md").write_text("other text")
    (copy / "bench" / "report_like.py").write_text("x = 1\n")  # not training code
    assert provenance.code_version() == same
    layer = copy / "variants" / "attention.py"
    layer.write_bytes(layer.read_bytes() + b"\n")
    assert provenance.code_version() != same


def test_report_labels_rows_from_other_code(tmp_path, store_at):
    """The report's rows: a run from another commit is a row of its own, labelled with it."""
    uri = store_at(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    exp = client.create_experiment("g", artifact_location=(tmp_path / "art").as_uri())
    for seed, commit in enumerate([provenance.git_commit(), provenance.git_commit(), "c" * 40]):
        r = client.create_run(exp, tags={names.ROLE: "trial", names.HASH: str(seed),
                                         metrics.GRID_KEYS: "model.variant"})
        client.log_batch(r.info.run_id, params=[Param(k, str(v)) for k, v in {
            "model.variant": "fixed", "seed": seed, "git_commit": commit}.items()])
        client.log_metric(r.info.run_id, "final_dev_bpc", 1.5 + seed)
        client.log_metric(r.info.run_id, "final_mean_span", 10.0 * (seed + 1))
        client.set_terminated(r.info.run_id)
    sweep, _ = report.load(uri, "g")
    labels = sweep.runs.groupby("label")["final_dev_bpc"].mean().to_dict()
    assert labels == {"fixed": 2.0, f"fixed (@{'c' * 7})": 3.5}
    assert sorted(sweep.runs["mean_span"]) == [10, 20, 30]  # the final summary, by its name


def test_corpus_as_mlflow_dataset():
    """What MLflow shows of a corpus comes from the corpus's own description: a generated one
    by its builder's options, a file by its path."""
    corpus = data.build("synthetic", n_chars=20_000)
    ds = writer.corpus_dataset(corpus.describe())._to_mlflow_entity()
    profile = json.loads(ds.profile)
    assert (ds.name, ds.source_type, ds.digest) == ("synthetic", "code",
                                                   corpus.meta["sha256"][:16])
    assert profile["sha256"] == corpus.meta["sha256"] and profile["n_bytes"] == 20_000
    assert profile["entropy_rate"] == corpus.floor_bpc() and profile["prefix"] is False
    assert json.loads(ds.source)["tags"]["distances"] == list(corpus.planted())
    text = data.build("file", path=Path(__file__))
    ds = writer.corpus_dataset(text.describe())._to_mlflow_entity()
    assert ds.source_type == "local" and json.loads(ds.profile)["entropy_rate"] is None


def test_unreadable_checkpoint_starts_fresh(tmp_path, capsys):
    cfg = resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "span": 16},
                   "data": {"n_chars": 20_000},
                   "train": {"block": 16, "batch_size": 2, "steps": 4, "eval_every": 2,
                             "eval_tokens": 200, "warmup": 1}}, "tiny")
    first = train(cfg, tmp_path / "a", progress=False)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / "result.json").unlink()
    (tmp_path / "b" / "checkpoint.pt").write_bytes(b"truncated")
    again = train(cfg, tmp_path / "b", progress=False)
    assert "is unreadable" in capsys.readouterr().err
    assert (tmp_path / "b" / "checkpoint.pt.corrupt").read_bytes() == b"truncated"
    assert [h["step"] for h in again.history] == [2, 4]  # from step 0, not resumed
    assert again.dev_bpc == pytest.approx(first.dev_bpc)  # the same training, redone
    assert load_checkpoint(tmp_path / "b" / "checkpoint.pt", torch.device("cpu")) is not None


def test_flops_counting_failure_keeps_the_trained_result(tmp_path, store_at, monkeypatch, capsys):
    """fvcore failing on a model (say a new variant its tracer rejects) is recorded in the
    result, which keeps its bpc, and on the run as attnbench.flops_error."""
    def reject(model):
        raise RuntimeError("fvcore skipped matmul-like ops ['aten::new_op']")

    monkeypatch.setattr("bench.training.summary.counted_flops", reject)
    cfg = resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "span": 16},
                   "data": {"n_chars": 20_000},
                   "train": {"block": 16, "batch_size": 2, "steps": 2, "eval_every": 2,
                             "eval_tokens": 200, "warmup": 1}}, "tiny")
    result = train(cfg, tmp_path, progress=False)
    assert result.flops_counted is None and "aten::new_op" in result.flops_error
    assert 0 < result.dev_bpc < 8 and (tmp_path / "result.json").exists()
    assert "counting FLOPs failed" in capsys.readouterr().err
    uri = store_at(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    exp = store.experiment_id(client, "g", uri)
    trial = writer.TrialRun(uri, client.create_run(exp).info.run_id)
    trial.finish(result, tmp_path)
    finished = client.get_run(trial.run_id)
    assert finished.info.status == "FINISHED"
    assert "aten::new_op" in finished.data.tags[names.FLOPS_ERROR]
    assert "flops_counted" not in finished.data.metrics and "final_dev_bpc" in finished.data.metrics


def _log_provenance(uri: str, exp: str, folder: str, go) -> str:
    """One trial worker: a run of its own, then its provenance (the dataset input) at `go`."""
    run_id = MlflowClient(uri).create_run(exp).info.run_id
    go.wait()
    writer.TrialRun(uri, run_id).log_provenance(Path(folder))
    return run_id


def test_trials_logging_one_dataset_at_once(tmp_path, store_at):
    """Trials of one sweep log the same corpus as a dataset input at the same moment: MLflow
    checks for the dataset, then inserts it, so two writers collided (UNIQUE constraint failed:
    datasets...). Every run gets the input; the experiment holds the dataset once."""
    import multiprocessing as mp

    corpus = data.build("synthetic", n_chars=20_000)
    (tmp_path / "config.json").write_text(json.dumps({
        "dataset": corpus.describe(), **provenance.identity(),
        "versions": provenance.versions()}))
    uri = store_at(tmp_path / "mlflow.db")
    exp = store.experiment_id(store.open_store(uri), "race", uri)
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(6) as pool:
        go = manager.Barrier(6)
        ids = pool.starmap(_log_provenance, [(uri, exp, str(tmp_path), go)] * 6)
    client = MlflowClient(uri)
    for run_id in ids:
        assert len(client.get_run(run_id).inputs.dataset_inputs) == 1


def test_a_sweep_whose_driver_is_gone_is_ended_when_the_next_starts(tmp_path, store_at):
    """A sweep run left RUNNING by a driver that died without ending it (kill -9) is marked
    KILLED, with the reason, by the next sweep's start; one whose driver lives, or runs on
    another host (not known to be gone), and finished ones are left as they are."""
    import socket

    uri = store_at(tmp_path / "mlflow.db")
    client = store.open_store(uri)
    exp = store.experiment_id(client, "smoke", uri)
    grid = ROOT / "examples" / "smoke.yaml"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    ids = {}
    for who, process in [("dead", f"{host}:{dead.pid}"), ("alive", writer.this_process()),
                         ("elsewhere", f"not-{host}:{dead.pid}"), ("done", f"{host}:{dead.pid}")]:
        ids[who] = writer.start_sweep(client, exp, read_grid_text(grid), "cmd",
                                      page.Look("smoke", [], 1, 1, []), grid.read_text())
        client.set_tag(ids[who], names.SWEEP_PROCESS, process)
    writer.end_sweep(client, ids["done"], "FINISHED")
    assert client.get_run(ids["alive"]).data.tags[names.SWEEP_PROCESS] == writer.this_process()
    assert writer.end_lost_sweeps(client, exp) == [ids["dead"]]
    status = {who: client.get_run(i).info.status for who, i in ids.items()}
    assert status == {"dead": "KILLED", "alive": "RUNNING", "elsewhere": "RUNNING",
                      "done": "FINISHED"}
    assert str(dead.pid) in client.get_run(ids["dead"]).data.tags[names.LOST]
    assert names.LOST not in client.get_run(ids["done"]).data.tags
    assert writer.end_lost_sweeps(client, exp) == []  # once


def test_a_measurement_is_a_finished_run_with_its_table(tmp_path, store_at):
    """bench.speed --mlflow's run: its params, the commit and versions, its metrics and its
    table as an artifact, in an experiment of its own; status FINISHED."""
    import pandas as pd

    uri = store_at(tmp_path / "mlflow.db")
    table = pd.DataFrame({"variant": ["fixed", "adaptive"], "tokens_per_s": [100.0, 150.0]})
    run_id = writer.log_measurement(uri, "speed", {"repeats": "5"}, {"matmul_gflops": 12.5},
                                    table)
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "speed"
    assert run.data.params["repeats"] == "5" and run.data.params["git_commit"]
    assert run.data.params["torch"] == provenance.versions()["torch"]
    assert run.data.metrics == {"matmul_gflops": 12.5}
    logged = json.loads(Path(client.download_artifacts(run_id, "speed.json", str(tmp_path)))
                        .read_text())
    assert logged["data"] == [["fixed", 100.0], ["adaptive", 150.0]]


def claims_page(tmp_path: Path, n: int, parts: list[page.Part], pngs: list[Path]) -> page.Page:
    """A sweep's page of `n` claims (c1 reproduced, the rest not tested) with `parts`."""
    claims = [page.ClaimResult("c1", "reproduced", 0.5, 0.01),
              *(page.ClaimResult(f"c{i}", "not tested", float("nan"), float("nan"))
                for i in range(2, n + 1))]
    lines = ["| claim | verdict | effect (interval) | p (rule) | evidence |",
             "|" + " --- |" * 5,
             *(f"| {c.id} | {c.verdict} | 0.5 (≤ 0.9) | 0.01 (rule p ≤ 12/256) | "
               "confirmatory |" for c in claims)]
    return page.Page(claims, lines, parts, "CPU, AVX512 kernels, fp32 (48 runs)", "fp32", pngs,
                     "report/findings.md", tmp_path)


def test_a_sweeps_page_says_what_ran_at_each_look_and_what_it_found(tmp_path, store_at):
    """The sweep's run after its second look: trials, looks and seeds as tags (rewritten at
    each look; the trials and the look as metrics, a step each), each claim's verdict, effect
    and p under short names; its description the report top to bottom: the counts and every
    verdict in its first line, a line per claim, the parts, the figures as images of the run
    (shown at the page's width) and a link to the whole report; the experiment's description
    counting the verdicts in its first line, linking here, then a line per verdict."""
    from PIL import Image

    uri = store_at(tmp_path / "mlflow.db")
    client = store.open_store(uri)
    exp = store.experiment_id(client, "g", uri)
    smoke = ROOT / "examples" / "smoke.yaml"
    parent = writer.start_sweep(client, exp, read_grid_text(smoke), "cmd",
                                page.Look("g", ["a"] * 24, 1, 3, [80, 81, 82, 83]),
                                smoke.read_text())
    writer.log_trials_covered(client, parent, page.Look("g", ["a"] * 48, 2, 3, list(range(80, 88))))
    png = tmp_path / "claims_per_seed.png"
    Image.new("RGB", (1600, 900)).save(png)
    table = page.Part("### Table 1\n\n| Model | test |\n| --- | --- |\n| fixed | 1.0 |",
                      "Table 1", "report/t1.md")
    shown = claims_page(tmp_path, 2, [page.Part("Pre-registration: confirmatory.", "the line",
                                                "report/findings.md"), table], [png])
    writer.log_report(client, client.get_run(parent), [png], shown)
    run = client.get_run(parent)
    tags, metrics = run.data.tags, run.data.metrics
    assert (tags["trials"], tags["looks"], tags["seeds"]) == ("48", "2 of 3", "80-87")
    assert [(m.step, m.value) for m in client.get_metric_history(parent, "trials")] == [
        (1, 24), (2, 48)]
    assert "n_trials" not in run.data.params  # a param cannot change at the next look
    assert (tags["verdict.c1"], tags["verdict.c2"]) == ("reproduced", "not tested")
    assert metrics == {"trials": 48, "looks": 2, "effect.c1": 0.5, "p.c1": 0.01}
    assert client.get_metric_history(parent, "p.c1")[0].step == 2  # at the look reached
    assert (tags["precision"], tags["machine"]) == ("fp32", "CPU, AVX512 kernels, fp32 (48 runs)")
    assert tags[names.SETTING] == names.SWEEPS  # its group in the runs table
    note = tags["mlflow.note.content"]
    image = f"![claims_per_seed](get-artifact?path=figures%2Fclaims_per_seed.png&run_uuid={parent})"
    assert note.startswith("\n\n".join([
        "**48 trials**, look 2 of 3, seeds 80-87: c1 **reproduced** · c2 **not tested**.",
        "\n".join(shown.lines), "Pre-registration: confirmatory.", table.markdown, image, ""]))
    tail = note.split("\n\n")[-1]
    assert f"[report/findings.md]({page.artifact_url(exp, parent, 'report/findings.md')})" \
        in tail and str(tmp_path) in tail
    assert {f.path for f in client.list_artifacts(parent, "figures")} == {
        "figures/claims_per_seed.png"}
    logged = client.download_artifacts(parent, "figures/claims_per_seed.png", str(tmp_path))
    assert Image.open(logged).size == (page.SHOWN_PX, 450)  # the page's width, same shape
    about = client.get_experiment(exp).tags["mlflow.note.content"].splitlines()
    assert about[0].startswith("1 reproduced, 1 not tested (sweep-")
    assert view.run_url(exp, parent) in about[0] and view.view_url(exp) in about[0]
    assert about[2:] == ["- c1: reproduced", "- c2: not tested"]


def test_a_report_too_long_for_the_store_keeps_its_verdicts_and_figures(tmp_path, store_at):
    """A page longer than the store keeps: the parts that do not fit are left out, each named
    with a link to its artifact, the claims' lines that do not fit likewise; the head, the
    figures and the link to the whole report stay, and the sweep goes on (no error)."""
    from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

    def link(path: str) -> str:
        return f"#/{path}"

    wide = page.Part("| " + "x" * 6000 + " |", "Table 1", "report/t1.md")
    small = page.Part("| a table |", "Table 3", "report/t3.md")
    shown = "![claims_per_seed](get-artifact?path=figures%2Fclaims_per_seed.png)"
    text = page.compose(claims_page(tmp_path, 5, [wide, small], []), "**48 trials**", shown,
                        link, 4000)
    assert len(text) <= 4000 and "| c5 | not tested |" in text and shown in text
    assert "x" * 100 not in text and "| a table |" in text  # what fits is kept
    assert ("*Left out here (the store keeps 4,000 characters): Table 1, "
            "[report/t1.md](#/report/t1.md).*") in text
    assert text.endswith("`" + str(tmp_path) + "` and the run's Artifacts.")
    many = page.compose(claims_page(tmp_path, 200, [small], []), "**48 trials**", shown, link,
                        4000)
    assert len(many) <= 4000 and "| c2 |" in many and "| c200 |" not in many and shown in many
    kept = len(re.findall(r"^\| c\d+ \|", many, re.MULTILINE))
    assert f"Left out here (the store keeps 4,000 characters): claims {kept + 1} to 200, " \
        "[report/findings.md](#/report/findings.md)." in many
    assert page.within_limit("short", 1000, "unused") == "short"
    uri = store_at(tmp_path / "mlflow.db")
    client = store.open_store(uri)
    exp = store.experiment_id(client, "g", uri)
    smoke = ROOT / "examples" / "smoke.yaml"
    parent = writer.start_sweep(client, exp, read_grid_text(smoke), "cmd",
                                page.Look("g", ["a"], 1, 1, [0]), smoke.read_text())
    writer.log_report(client, client.get_run(parent), [],
                      claims_page(tmp_path, 5, [wide, wide], []))
    note = client.get_run(parent).data.tags["mlflow.note.content"]
    assert len(note) <= MAX_TAG_VAL_LENGTH and note.count("Left out here") == 1
    assert "| c5 | not tested |" in note and "x" * 6000 in note  # the first one fits


def test_the_experiments_view_opens_on_the_sweep_and_its_trials_by_setting(tmp_path, store_at):
    """The view the printed address opens (`viewStateShareKey`): the sweeps' group first (the
    runs sorted by their trial count, which only sweeps have) and open, a collapsed group per
    setting; the claims' metric, the trials and looks and each claim's verdict as columns,
    sized to show their names; no seed (a group would average it); the chart view opening on
    the claims' metric by setting."""
    uri = store_at(tmp_path / "mlflow.db")
    client = store.open_store(uri)
    exp = store.experiment_id(client, "g", uri)
    settings = ["fixed-n_heads=2", "talking-heads-n_heads=2"]
    view.share_view(client, exp, ["model.variant", "model.n_heads"],
                    ["final_test_bpc", "final_test_bpc"], ["c1", "c2"], settings)
    state = json.loads(client.get_experiment(exp).tags[view.SHARED + view.VIEW])
    columns = ["metrics.`final_test_bpc`", "tags.`trials`", "tags.`looks`",
               "tags.`verdict.c1`", "tags.`verdict.c2`"]
    assert state["selectedColumns"] == columns
    assert state["columnOrder"] == [view.NAME, *columns, *view.FIXED]
    assert state["columnWidths"][view.NAME] >= view._width(len("Group: talking-heads-n_heads=2"))
    assert state["columnWidths"]["tags.`verdict.c1`"] == view._width(len("verdict.c1"))
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`trials`", False)
    assert state["groupBy"] == {"aggregateFunction": "average", "groupByKeys": [
        {"mode": "tag", "groupByData": "setting"}]}
    assert state["groupsExpanded"] == {"tag.setting.fixed-n_heads=2": False,
                                       "tag.setting.talking-heads-n_heads=2": False}
    charts = state["compareRunCharts"]
    assert [(c["type"], c.get("metricKey"), c.get("xaxis")) for c in charts] == [
        ("BAR", "final_test_bpc", None),
        ("SCATTER", None, {"key": "model.n_heads", "type": "PARAM"})]
    assert {c["metricSectionId"] for c in charts} == {state["compareRunSections"][0]["uuid"]}
    assert store.ui_url(exp) == (f"http://127.0.0.1:5000/#/experiments/{exp}/runs?"
                                 "workflowType=machine_learning&viewStateShareKey=trials")


def test_the_closing_hint_names_a_tracking_servers_own_address():
    """Where the store is a tracking server its UI is at its address; an sqlite file needs
    `mlflow ui` on it first."""
    assert store.ui_hint("http://10.0.0.5:5001/", "3") == \
        "http://10.0.0.5:5001/#/experiments/3/runs?workflowType=machine_learning&" \
        "viewStateShareKey=trials"
    assert store.ui_hint("sqlite:////r/mlflow.db", "3").startswith(
        "mlflow ui --backend-store-uri sqlite:////r/mlflow.db --host 127.0.0.1\n")


def test_a_resumed_trial_logs_the_evaluations_it_took_from_its_checkpoint(tmp_path, store_at):
    """A trial resumed from its checkpoint (or finished while the server was down) reported
    only its later evaluations: its run gets the rest, each step once."""
    uri = store_at(tmp_path / "mlflow.db")
    client = store.open_store(uri)
    exp = store.experiment_id(client, "g", uri)
    run = writer.TrialRun(uri, client.create_run(exp).info.run_id)
    run.provenance_logged = True  # what this test is not about

    def evaluation(step: int) -> dict:
        return {"step": step, "tokens": step * 10, "train_bpc": 3.0, "dev_bpc": 3.0 - step / 100,
                "lr": 0.01, "tokens_per_s": 1.0, "train_time_s": 1.0, "mean_span": 8.0,
                "probe_bpc": {"recall": 0.5}, "peak_rss_mb": 100.0}

    run.log_eval(evaluation(30), tmp_path)  # the one reported after the resume
    run.log_history([evaluation(s) for s in (10, 20, 30)], tmp_path)
    for key in ("dev_bpc", "train_bpc", "lr", "dev_bpc.recall"):
        history = client.get_metric_history(run.run_id, key)
        assert sorted(m.step for m in history) == [10, 20, 30], key
    assert {m.step: m.value for m in client.get_metric_history(run.run_id, "dev_bpc")} == {
        10: 2.9, 20: 2.8, 30: 2.7}


def test_a_tracking_server_that_does_not_answer_stops_a_sweep_with_one_line(tmp_path, capsys,
                                                                             monkeypatch):
    """A sweep whose server does not answer (none on the port): exit 2 within seconds (not
    MLflow's minutes of retries), one line naming the server and how to resume, no traceback,
    nothing trained; the stopper that watches a sweep's server stops every trial."""
    import socket
    import time

    from bench.sweep import watch

    for key, value in store.PATIENCE.items():  # limit_server_retries sets them; undone after
        monkeypatch.setenv(key, value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once it is closed
    assert not store.answering(uri) and store.answering(f"sqlite:///{tmp_path / 'db'}")
    grid = ROOT / "examples" / "smoke.yaml"
    options = runner.SweepOptions(grid, tmp_path / "results", "cmd", tracking_uri=uri)
    trials = resolve_trials(open_grid(grid), False, results_dir=tmp_path / "results")
    start = time.monotonic()
    code = runner.sweep(open_grid(grid), trials, options)
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2 and took < 60, (code, took)
    assert err.count("\n") == 1 and f"the MLflow server at {uri} does not answer" in err
    assert "nothing was trained" in err and "the trials trained" not in err
    assert "rerun the same command" in err and "Traceback" not in err
    assert not (tmp_path / "results" / "smoke" / "trials").exists()
    gone: list[str] = []
    assert watch.make_watch(uri, gone).stop_all() and gone == [
        f"the MLflow server at {uri} does not answer"]
