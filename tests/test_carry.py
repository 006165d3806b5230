"""What a run on a lent GPU machine carries (`ci/carry.py`): the tracked and the untracked
unignored files and carry/ counted against the budget, ignored ones not, and the largest paths
named when over it; the commit written down for a copy without .git; the corpus carried
compressed; a missing bundle said; what carry/ held recorded. And the check CI keeps, without a
bundle: the committed record's package set is the one the pins give, and this checkout with
the recorded carry/ fits the budget."""

import json
import lzma
import subprocess
from pathlib import Path

from bench import provenance
from ci import bundle, carry

ROOT = Path(__file__).resolve().parents[1]


def a_checkout(tmp_path):
    """A git checkout beside shared/data/enwik8.head: tracked files (two in docs/), an
    untracked one, an ignored one and an ignored carry/."""
    root = tmp_path / "repo"
    (root / "ci").mkdir(parents=True)
    (root / "docs").mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text("/carry/\n*.log\n")
    (root / "tracked.py").write_bytes(b"x" * 1000)
    (root / "docs" / "a.png").write_bytes(b"x" * 3000)
    (root / "docs" / "b.png").write_bytes(b"x" * 2000)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    (root / "new.py").write_bytes(b"x" * 200)
    (root / "big.log").write_bytes(b"x" * 5000)
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    (data / "enwik8.head").write_bytes(b"<page>enwik8</page>\n" * 500)
    return root


def test_what_travels_is_counted_against_the_budget(tmp_path, monkeypatch):
    root = a_checkout(tmp_path)
    names = [p.relative_to(root).as_posix() for p in carry.travelling(root)]
    assert names == [".gitignore", "docs/a.png", "docs/b.png", "new.py", "tracked.py"]
    corpus = tmp_path / "shared" / "data" / "enwik8.head"
    missing = carry.prepare(root / "carry", corpus)
    assert len(missing) == 1 and "python -m ci.bundle --python 3.12" in missing[0]
    packed = root / "carry" / "shared" / "data" / "enwik8.head.xz"
    assert lzma.decompress(packed.read_bytes()) == corpus.read_bytes()
    assert packed.stat().st_size < corpus.stat().st_size / 10
    tree = carry.sizes(root, carry.travelling(root))  # not big.log, not carry/
    held = carry.sizes(root / "carry", [root / "carry"])
    assert held == {"shared/data/enwik8.head.xz": packed.stat().st_size}
    line, fits = carry.budget(tree, held)
    total = 6200 + len("/carry/\n*.log\n") + sum(held.values())
    assert fits and line.startswith(f"carried: {total / 2**20:.1f} MiB of 63 MiB")
    monkeypatch.setattr(carry, "BUDGET", total - 1)
    line, fits = carry.budget({**tree, "docs/a.png": 3 * 2**20}, held, top=3)
    assert not fits and line.endswith(  # a folder, then the files in it
        "the largest: docs/ 3.0 MiB, docs/a.png 3.0 MiB, docs/b.png 0.0 MiB")


def a_bundle(site: Path, path: Path) -> Path:
    """An offline bundle as ci.bundle packs one (from `site`), holding two distributions'
    metadata."""
    for folder in ("ray-2.60.0.dist-info", "mlflow_skinny-3.17.2.dist-info", "ray"):
        (site / folder).mkdir(parents=True)
        (site / folder / "METADATA").write_text("Name: x\n")
    return bundle.pack(site, path)


def test_the_command_records_the_carry_and_fails_while_missing_or_too_big(tmp_path,
                                                                          monkeypatch, capsys):
    root = a_checkout(tmp_path)
    monkeypatch.setattr(carry, "ROOT", root)
    corpus = ["--carry", str(root / "carry"), "--corpus",
              str(tmp_path / "shared" / "data" / "enwik8.head")]
    assert carry.main(corpus) == 1  # no bundle yet, so nothing recorded
    assert "missing: " in capsys.readouterr().err and not (root / carry.RECORD).exists()
    a_bundle(tmp_path / "site", root / "carry" / carry.BUNDLE)
    # the commit as the tree is once the record is rewritten (here: the record's bytes)
    monkeypatch.setattr(carry, "git_commit", lambda: (root / carry.RECORD).read_text()[:40])
    assert carry.main(corpus) == 0
    assert capsys.readouterr().out.startswith("carried: ")
    assert (root / "carry" / "commit").read_text() == (root / carry.RECORD).read_text()[:40] \
        + "\n"
    record = json.loads((root / carry.RECORD).read_text())
    assert record["python"] == "3.12"
    assert record["packages"] == {"mlflow-skinny": "3.17.2", "ray": "2.60.0"}
    assert set(record["files"]) == {carry.BUNDLE, "shared/data/enwik8.head.xz"}  # no commit
    monkeypatch.setattr(carry, "BUDGET", 100)
    assert carry.main(corpus) == 1
    err = capsys.readouterr()
    assert "more than a GPU run may carry" in err.err and "; the largest: docs/ " in err.out


def test_this_checkout_and_the_recorded_carry_fit_the_budget():
    """The check CI keeps, with no bundle built there: ci/carry.json, what carry/ held when
    `python -m ci.carry` last ran, holds the package set the pins give now (else the bundle must
    be rebuilt: its size is not known), and the files that travel from this checkout with the
    recorded carry/ (and the commit's line) stay within the budget."""
    record = json.loads((ROOT / carry.RECORD).read_text())
    assert record["packages"] == bundle.distributions(record["python"]), (
        "the bundle's package set changed: python -m ci.bundle --python 3.12 --out carry, then "
        "python -m ci.carry (which rewrites ci/carry.json)")
    held = {**record["files"], "commit": len(provenance.git_commit()) + 1}
    line, fits = carry.budget(carry.sizes(ROOT, carry.travelling(ROOT)), held)
    assert fits, line
