"""The GPU script's packing of what comes back (`ci/pack.py`): a finished sweep's folder leaves
at most eight plain files at the top of the output folder, each within the device tool's
16 MiB, its runs, findings and logs in the archive and its checkpoints, locks, MLflow artifact
copies and Ray folders not; packing again replaces what the last packing wrote, and a packing
cut short leaves it whole."""

import os
import tarfile
from pathlib import Path

import pytest

from ci import pack

SWEEP = {  # a finished two-trial sweep as bench.run leaves it, and the script's own files
    "heads_grid/runs.csv": "run,seed\n", "heads_grid/findings.md": "# findings\n",
    "heads_grid/findings.csv": "claim\n", "heads_grid/learning_curves.png": "png",
    "heads_grid/trials/ab12/config.json": "{}", "heads_grid/trials/ab12/result.json": "{}",
    "heads_grid/trials/ab12/checkpoint.pt": "w" * 1000, "heads_grid/trials/ab12/best.pt": "w",
    "heads_grid/trials/cd34/checkpoint.pt.corrupt": "w", "heads_grid/trials/cd34/state.lock": "",
    "heads_grid/ray/run-1/trial/result.json": "{}", "heads_grid/ray/run-1/state.json": "{}",
    "mlflow.db": "db", "mlflow.db.lock": "", "mlartifacts/1/abc/artifacts/report/x.md": "x",
    "heads_grid.log": "log\n", "checks.log": "ok\n"}


def finished_sweep(root: Path) -> Path:
    for name, text in SWEEP.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def members(out: Path) -> list[str]:
    with tarfile.open(out / "results.tar.xz") as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


def test_a_finished_sweep_comes_back_as_a_few_files(tmp_path):
    work = finished_sweep(tmp_path / "work")
    loose = [tmp_path / n for n in ("compare.md", "commands.md", "machine.txt")]
    for f in loose:
        f.write_text(f.name)
    out = tmp_path / "out"
    assert pack.main([str(work), str(out), *map(str, loose), str(tmp_path / "absent.md")]) == 0
    there = sorted(out.iterdir())
    assert [p.name for p in there] == ["commands.md", "compare.md", "machine.txt",
                                       "results.tar.xz"]
    assert all(p.is_file() and p.stat().st_size <= 16 * 2**20 for p in there)
    assert members(out) == sorted(f"results/{n}" for n in (
        "heads_grid/runs.csv", "heads_grid/findings.md", "heads_grid/findings.csv",
        "heads_grid/learning_curves.png", "heads_grid/trials/ab12/config.json",
        "heads_grid/trials/ab12/result.json", "mlflow.db", "heads_grid.log", "checks.log"))


def test_a_large_archive_comes_back_in_pieces_that_join(tmp_path, monkeypatch):
    work = finished_sweep(tmp_path / "work")
    (work / "heads_grid" / "noise.bin").write_bytes(os.urandom(50_000))  # xz cannot shrink it
    monkeypatch.setattr(pack, "PART", 20_000)
    written = pack.pack(work, tmp_path / "out", [])
    assert [p.name for p in written] == [f"results.tar.xz.{i}" for i in range(len(written))]
    assert len(written) > 1 and all(p.stat().st_size <= 20_000 for p in written)
    (tmp_path / "out" / "results.tar.xz").write_bytes(b"".join(p.read_bytes() for p in written))
    assert "results/heads_grid/noise.bin" in members(tmp_path / "out")


def test_more_files_than_come_back_is_an_error(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    for i in range(pack.MAX_FILES):
        (out / f"left{i}.txt").write_text("x")
    with pytest.raises(ValueError, match="at most 8 files"):
        pack.pack(finished_sweep(tmp_path / "work"), out, [])
    assert pack.main([str(tmp_path / "work"), str(out)]) == 1
    assert "the device tool brings back at most 8 files" in capsys.readouterr().err


def test_packing_again_replaces_the_last_and_a_cut_packing_leaves_it_whole(tmp_path,
                                                                           monkeypatch):
    """The script packs after every grid: a larger archive's pieces go when a smaller one
    follows, and a packing that fails half-way (a kill) leaves the last archive readable."""
    work, out = finished_sweep(tmp_path / "work"), tmp_path / "out"
    (work / "heads_grid" / "noise.bin").write_bytes(os.urandom(50_000))
    monkeypatch.setattr(pack, "PART", 20_000)
    assert len(pack.pack(work, out, [])) > 1
    (work / "heads_grid" / "noise.bin").unlink()
    assert [p.name for p in pack.pack(work, out, [])] == ["results.tar.xz"]
    assert sorted(p.name for p in out.iterdir()) == ["results.tar.xz"]
    before = members(out)
    (work / "heads_grid" / "later.csv").write_text("x\n")
    kept = pack.kept

    def cut(info):
        if info.name.endswith("later.csv"):
            raise KeyboardInterrupt  # as a kill would, half-way through the archive
        return kept(info)

    monkeypatch.setattr(pack, "kept", cut)
    with pytest.raises(KeyboardInterrupt):
        pack.pack(work, out, [])
    assert members(out) == before  # the last archive, whole
