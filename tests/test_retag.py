"""One name per thing: an earlier name is refused with the name to use, and `python -m
bench.retag` migrates records made under it once (an sqlite store's trial hashes and params, a
committed result folder), changing nothing the second time and refusing a store that is not
attnbench's. A temporary store; no Ray, no training."""

import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient

import variants
from bench import retag
from bench.config import ConfigError, resolve
from bench.experiment.open import open_grid
from bench.sweep.migration import hash_renames
from bench.sweep.trials import resolve_trials
from bench.tracking import names
from tests.test_grid import write_grid

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("where, name, now", [("variant", "dynamic", "dynamic-span"),
                                              ("span_policy", "dynamic", "dynamic-span"),
                                              ("mixing", "dynamic", "dynamic-projections")])
def test_an_earlier_name_is_refused_with_the_name_to_use(where, name, now):
    tree = {"model": {"variant": name}} if where == "variant" else {
        "model": {"variant": "fixed", "attn": {where: name}}}
    with pytest.raises(ConfigError, match=f"'{name}' was renamed '{now}'"):
        resolve(tree)
    assert name not in variants.names()


def store_with_old_runs(tmp_path: Path) -> tuple[str, Path, dict[str, str]]:
    """A store holding one trial run logged as runs were under `dynamic`: its variant and span
    policy under that name, its trial hash the one the name gave."""
    grid = write_grid(tmp_path, "renamed", grid={"model.variant": ["dynamic-span"]})
    hashes = hash_renames(resolve_trials(open_grid(grid), False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("renamed")
    old = next(h for h in hashes)
    run = client.create_run(exp, tags={names.ROLE: "trial", names.HASH: old})
    for key, value in (("model.variant", "dynamic"), ("layer.span_policy", "dynamic"),
                       ("train.lr", "0.07")):
        client.log_param(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id)
    return uri, grid, hashes


def test_retag_migrates_a_store_once(tmp_path, capsys):
    uri, grid, hashes = store_with_old_runs(tmp_path)
    assert retag.main([str(grid), "--tracking-uri", uri]) == 0
    assert "1 trial hashes, 2 params" in capsys.readouterr().out
    (run,) = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name(
        "renamed").experiment_id])
    assert run.data.tags[names.HASH] in hashes.values()
    assert run.data.params["model.variant"] == "dynamic-span"
    assert run.data.params["layer.span_policy"] == "dynamic-span"
    assert run.data.params["train.lr"] == "0.07" and run.info.status == "FINISHED"
    assert retag.main([str(grid), "--tracking-uri", uri]) == 0  # again: nothing to do
    assert "0 trial hashes, 0 params" in capsys.readouterr().out


def test_retag_refuses_a_store_that_is_not_attnbench(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'plain.db'}"
    client = MlflowClient(uri)
    client.set_terminated(client.create_run(client.create_experiment("other")).info.run_id)
    grid = write_grid(tmp_path, "renamed", grid={"model.variant": ["dynamic-span"]})
    assert retag.main([str(grid), "--tracking-uri", uri]) == 2
    assert "is not an attnbench store" in capsys.readouterr().err
    (tmp_path / "text.db").write_text("not a database")
    assert retag.main([str(grid), "--tracking-uri", f"sqlite:///{tmp_path / 'text.db'}"]) == 2
    assert "is not an MLflow store" in capsys.readouterr().err
    assert retag.main([str(grid), "--tracking-uri", "http://127.0.0.1:9"]) == 2
    assert "only an sqlite store" in capsys.readouterr().err
    assert len(client.search_runs([client.get_experiment_by_name("other").experiment_id])) == 1


def test_committed_result_folders_are_at_todays_names(tmp_path, capsys):
    """The committed folders made under `dynamic` were migrated: migrating a copy again
    changes nothing."""
    folders = [ROOT / "results" / "design" / "adaptive_vs_dynamic-r32",
               ROOT / "results" / "adaptive_vs_dynamic"]
    copies = [shutil.copytree(f, tmp_path / f.name) for f in folders]
    assert retag.main(["--results", *map(str, copies)]) == 0
    out = capsys.readouterr().out
    assert out.count("0 grid names, 0 names, 0 trial hashes, 0 trial hashes not found") == 2
    for f, c in zip(folders, copies, strict=True):
        assert (c / "runs.csv").read_text() == (f / "runs.csv").read_text()
    assert retag.main(["--results", str(tmp_path / "missing")]) == 2
