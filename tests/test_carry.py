"""What a run on a lent GPU machine carries (`ci/carry.py`): the tracked and the untracked
unignored files and carry/ counted against the device tool's 64 MiB, ignored ones not; the
commit written down for a copy without .git; the corpus and a missing bundle said."""

import subprocess

from bench import provenance
from ci import carry


def a_checkout(tmp_path):
    """A git checkout beside ../shared/data/enwik8.head: a tracked file, an untracked one,
    an ignored one and an ignored carry/."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text("/carry/\n*.log\n")
    (root / "tracked.py").write_bytes(b"x" * 1000)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    (root / "new.py").write_bytes(b"x" * 200)
    (root / "big.log").write_bytes(b"x" * 5000)
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    (data / "enwik8.head").write_bytes(b"e" * 3000)
    return root


def test_what_travels_is_counted_against_the_budget(tmp_path, monkeypatch):
    root = a_checkout(tmp_path)
    names = [p.name for p in carry.travelling(root)]
    assert names == [".gitignore", "new.py", "tracked.py"]  # not big.log, not carry/
    missing = carry.prepare(root, root / "carry")
    assert len(missing) == 1 and "python -m ci.bundle --python 3.12" in missing[0]
    assert (root / "carry" / "commit").read_text().strip() == provenance.git_commit()
    assert (root / "carry" / "shared" / "data" / "enwik8.head").stat().st_size == 3000
    line, fits = carry.budget_line(root, root / "carry")
    tree = 1200 + len("/carry/\n*.log\n")
    extra = 3000 + len(provenance.git_commit()) + 1
    assert fits and line.startswith(f"carried: {(tree + extra) / 2**20:.1f} MiB of 64 MiB")
    monkeypatch.setattr(carry, "BUDGET", tree + extra - 1)
    assert carry.budget_line(root, root / "carry")[1] is False


def test_the_command_fails_while_something_is_missing_or_too_big(tmp_path, monkeypatch,
                                                                   capsys):
    root = a_checkout(tmp_path)
    monkeypatch.setattr(carry, "ROOT", root)
    assert carry.main([]) == 1  # no bundle yet
    assert "missing: " in capsys.readouterr().err
    (root / "carry" / carry.BUNDLE).write_bytes(b"b" * 100)
    assert carry.main([]) == 0
    assert capsys.readouterr().out.startswith("carried: ")
    monkeypatch.setattr(carry, "BUDGET", 100)
    assert carry.main([]) == 1
    assert "more than the device tool carries" in capsys.readouterr().err
