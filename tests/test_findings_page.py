"""findings.md regenerated whole: the review's edits outside the table (a claim's text turned
into its opposite, the Data line's digest, the Machine line, the grid status, the
pre-registration line, an added sentence), each on a copy of a committed result folder, are
named by `bench.verify` (exit 1): the line, what the page says and what it must say. The
registered code writes the page of a confirmation; today's code its local paragraphs."""

import shutil
import tempfile
from itertools import zip_longest
from pathlib import Path

import pytest

from bench import verify as verify_cmd
from bench.findings.presentation.page import Local, differs, place, regenerate
from bench.findings.provenance.verify import verify

ROOT = Path(__file__).resolve().parents[1]
# (what the page said, what the edit makes it say): the review's edits outside the table
EDITS = {
    "claim 1 turned into its opposite": ("answers the recall probe with fewer bits",
                                         "answers the recall probe with more bits"),
    "the Data line's sha256": ("sha256 afdc5f653d79", "sha256 0123456789ab"),
    "the Machine line": ("Machine: CPU, AVX512 kernels", "Machine: CPU, AVX2 kernels"),
    "the status line": ("Grid status: primary", "Grid status: repeat of heads_grid"),
    "the pre-registration line": ("Pre-registration: unverified: 48",
                                  "Pre-registration: confirmatory: 48"),
    "an added sentence": ("\n\n## Claims", "\n\nSummary: the headline was contradicted.\n\n"
                                           "## Claims"),
}


def _edit(page: Path, was: str, now: str) -> int:
    """`page` with `was` replaced by `now` (once; it must be there); the first line changed."""
    text = page.read_text()
    assert text.count(was) == 1, was
    page.write_text(text.replace(was, now))
    pairs = zip_longest(text.splitlines(), page.read_text().splitlines())
    return next(i for i, (a, b) in enumerate(pairs, 1) if a != b)


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edit_outside_the_table_is_named(tmp_path, capsys, edit):
    """A copy of results/heads_grid/seeds100 (unverified: its trials predate the plan records;
    today's code writes its page) verifies clean; each edit exits 1, naming its line, the text
    committed and the text regenerated."""
    folder = tmp_path / "seeds100"
    shutil.copytree(ROOT / "results" / "heads_grid" / "seeds100", folder)
    assert verify_cmd.main([str(folder), "--allow-unverified"]) == 0
    before = (folder / "findings.md").read_text().splitlines()
    line = _edit(folder / "findings.md", *EDITS[edit])
    capsys.readouterr()
    assert verify_cmd.main([str(folder), "--allow-unverified"]) == 1
    after = (folder / "findings.md").read_text().splitlines()
    said = f"findings.md: line {line}: {after[line - 1]!r} committed, {before[line - 1]!r} " \
        "regenerated"
    assert said in capsys.readouterr().err


def test_a_line_removed_or_added_at_the_end_is_named(tmp_path, capsys):
    """The claims list cut short (its last claim removed), or a line added after it: the first
    line past the shorter page is named against '(none)'."""
    folder = tmp_path / "seeds100"
    shutil.copytree(ROOT / "results" / "heads_grid" / "seeds100", folder)
    page = folder / "findings.md"
    lines = page.read_text().splitlines()
    page.write_text("\n".join(lines[:-1]) + "\n")
    assert verify_cmd.main([str(folder), "--allow-unverified"]) == 1
    assert f"line {len(lines)}: '(none)' committed, {lines[-1]!r} regenerated" in \
        capsys.readouterr().err
    page.write_text("\n".join([*lines, "6. `th_wins`: talking-heads wins"]) + "\n")
    assert verify_cmd.main([str(folder), "--allow-unverified"]) == 1
    assert f"line {len(lines) + 1}: '6. `th_wins`: talking-heads wins' committed, '(none)' " \
        "regenerated" in capsys.readouterr().err


def test_the_registered_codes_page_is_held_whole_with_todays_local_lines():
    """A copy of the committed confirmation on held-out data (seeds 900-907, registered in
    220f0faa29, whose analysis code is not today's) inside this repository, under the ignored
    runs/: its page is the registered code's, whole, with today's local paragraphs: the copy
    shares every trial with results/heads_grid/seeds900-data7, which its page must now say
    (the one line named), and claim 1 turned into its opposite is named too."""
    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "runs", prefix="data7-") as scratch:
        folder = Path(scratch) / "seeds900-data7"
        shutil.copytree(ROOT / "results" / "heads_grid" / "seeds900-data7", folder)
        checked = verify(folder)
        assert checked.page is not None and checked.differ == []  # the registered code's
        regenerated = regenerate(checked)
        named = differs(folder / "findings.md", regenerated)
        assert len(named) == 1 and "findings.md: line 11: '| claim " in named[0]
        assert named[0].endswith(f"committed, {checked.shared!r} regenerated")
        assert "all are trials of results/heads_grid/seeds900-data7 too" in checked.shared
        (folder / "findings.md").write_text(regenerated)
        assert differs(folder / "findings.md", regenerated) == []
        line = _edit(folder / "findings.md", "with fewer bits than", "with more bits than")
        named = differs(folder / "findings.md", regenerated)
    assert len(named) == 1 and f"line {line}: '1. `th_beats_mh_at_8`" in named[0]
    assert "more bits" in named[0].split(" committed, ")[0]


def test_place_puts_todays_local_paragraphs_before_the_table_whatever_the_page_had():
    """The pre-registration and Shared runs paragraphs are today's wherever a page came from:
    an older page's are replaced, a page without them gets them before its table."""
    page = "# g: findings\n\nData: x.\n\nPre-registration: old.\n\nShared runs: old.\n\n| a |" \
        "\n|:--|\n| 1 |\n\nnote\n"
    now = place(page, Local("Pre-registration: now.", "Shared runs: now."))
    assert now == "# g: findings\n\nData: x.\n\nPre-registration: now.\n\nShared runs: now." \
        "\n\n| a |\n|:--|\n| 1 |\n\nnote\n"
    assert place(now, Local("Pre-registration: now.")) == now.replace(
        "Shared runs: now.\n\n", "")
    assert place("# g\n\n| a |\n", Local("P")) == "# g\n\nP\n\n| a |\n"
