"""README.md and docs/results.md state only the committed findings' verdicts: their verdict
tables and sentences are generated from results/**/findings.csv (`python -m bench.resultsdoc`),
every other verdict word in their tables and numbered items stands beside the claim or folder
whose findings.csv says it, and no other sentence gives a verdict about a results folder. A
verdict edited by hand, in a table or in prose, or findings regenerated with another verdict,
fails here."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench import resultsdoc
from bench.findings.presentation import folders

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
README = ROOT / "README.md"


@pytest.fixture
def results(tmp_path) -> Path:
    """A root holding a copy of every committed findings.csv, to be edited."""
    for path in (ROOT / "results").glob("**/findings.csv"):
        to = tmp_path / path.relative_to(ROOT)
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, to)
    return tmp_path


def _set(root: Path, folder: str, claim: str, verdict: str) -> None:
    path = root / folder / "findings.csv"
    found = pd.read_csv(path)
    found.loc[found["claim"] == claim, "verdict"] = verdict
    found.to_csv(path, index=False)


def test_every_verdict_the_page_states_is_its_committed_findings(capsys):
    """The generated tables and sentences are current and every other verdict is its
    findings.csv's, in docs/results.md and the README."""
    assert resultsdoc.stale(PAGE.read_text()) == []
    assert resultsdoc.stale(README.read_text(), name="README.md") == []
    assert resultsdoc.main(["--check"]) == 0, capsys.readouterr().out


def test_a_folders_sentence_is_its_findings():
    """A generated sentence gives the folder's seeds and evidence, then its claims by verdict
    and look, in their test order (parts aside)."""
    assert folders.sentence("results/heads_grid/seeds300") == (
        "Seeds 300-307 (`results/heads_grid/seeds300/`, confirmatory): claims 1-4 reproduced at "
        "look 2 of 2 (8 seeds), claim 5 inconclusive at look 2 of 2 (8 seeds).")
    assert folders.sentence("results/span_limit/seeds400") == (
        "Seeds 400-407 (`results/span_limit/seeds400/`, unverified): claim 1 inconclusive at "
        "look 2 of 2 (8 seeds), claims 2-5 not tested.")
    assert folders.sentence("results/window_cost/seeds200") == (  # a measured cost: repetitions
        "Seeds 200-207 (`results/window_cost/seeds200/`, confirmatory): claim 1 reproduced at "
        "look 2 of 2 (8 seeds), claim 2 contradicted at look 2 of 2 (9 repetitions).")
    assert folders._numbers([1, 2, 4, 5]) == "claims 1, 2, 4 and 5" and \
        folders._numbers([3]) == "claim 3"


PROSE = [  # the review's edits of prose, and sentences written by hand outside the markers
    ("README.md", "Seeds 900-907 (`results/heads_grid/seeds900-data7/`, confirmatory): claims "
                  "1-5 reproduced", "Seeds 900-907 (`results/heads_grid/seeds900-data7/`, "
                  "confirmatory): claims 1-5 contradicted", "a generated block is stale"),
    ("README.md", "Every result: [docs/results.md]", "Seeds 900-907 reproduced all five claims. "
                  "Every result: [docs/results.md]", "'reproduced' said of a results folder"),
    ("docs/results.md", "The claims were written from these:", "The claims were written from "
                        "these, and every one holds there:", "'holds' said of a results folder"),
    ("docs/results.md", "The design runs ran on code_version", "`results/heads_grid/seeds900-"
                        "data7/` is contradicted. The design runs ran on code_version",
     "'contradicted' said of a results folder"),
]


@pytest.mark.parametrize("name, was, now, said", PROSE)
def test_a_verdict_in_prose_edited_or_written_by_hand_fails(name, was, now, said):
    """A generated sentence edited ("reproduced" -> "contradicted"), or a sentence outside the
    markers that gives a verdict about a results folder (naming it, or a seed range, or under a
    bold lead that names one): named, by its line."""
    text = (ROOT / name).read_text()
    assert was in text and resultsdoc.stale(text, name=name) == []
    found = resultsdoc.stale(text.replace(was, now, 1), name=name)
    assert len(found) == 1 and said in found[0] and found[0].startswith(name), found


def test_a_generated_sentence_follows_its_findings(results):
    """findings.csv regenerated with another verdict: the README's sentence is stale, and
    `fill` writes the new one."""
    text = README.read_text()
    assert resultsdoc.stale(text, results, "README.md") == []
    _set(results, "results/heads_grid/seeds900-data7", "th_not_worse_than_mh_at_4",
         "inconclusive")
    assert resultsdoc.stale(text, results, "README.md") == [
        "README.md: a generated block is stale: run python -m bench.resultsdoc"]
    assert "claims 1-4 reproduced at look 2 of 3 (8 seeds), claim 5 inconclusive at look 2 of " \
        "3 (8 seeds)." in resultsdoc.fill(text, results)


def test_every_section_of_claims_names_its_findings():
    """Each generated table names its findings.csv, and the folders the reviewer asked about
    have one: both span_limit runs, both main-job ranges before the plan records."""
    text = PAGE.read_text()
    blocks = [m[2].split() for m in resultsdoc.BLOCK.finditer(text)]
    assert ["results/heads_grid/seeds600"] in blocks and ["results/span_limit/seeds400"] in blocks
    assert ["results/heads_grid/seeds100", "results/heads_grid/seeds200"] in blocks
    for m in resultsdoc.BLOCK.finditer(text):
        assert all(f"`{f}/findings.csv`" in m[3] for f in m[2].split())


def test_a_verdict_edited_by_hand_fails():
    text = PAGE.read_text()
    table = text.replace("| `th_beats_mh_at_8` | 600-607 | sign-flip, log(y + 0.005) | -2.46 | "
                         "p ≤ 3/256, 0.0117 | reproduced |", "| `th_beats_mh_at_8` | 600-607 | "
                         "sign-flip, log(y + 0.005) | -2.46 | p ≤ 3/256, 0.0117 | inconclusive |")
    assert table != text
    assert resultsdoc.stale(table) == ["docs/results.md: a generated block is stale: run "
                                       "python -m bench.resultsdoc"]
    item = "1. `adaptive_matches_fixed`: *reproduced* at look 1"
    assert item in text
    found = resultsdoc.stale(text.replace(item, item.replace("reproduced", "inconclusive")))
    assert len(found) == 1 and "`adaptive_matches_fixed` is inconclusive; results/span_limit/" \
        "seeds800/findings.csv says reproduced" in found[0]
    summary = "`results/heads_grid/seeds300/`: 4 reproduced, 1 inconclusive (confirmatory)"
    assert summary in text
    found = resultsdoc.stale(text.replace(summary, "`results/heads_grid/seeds300/`: 5 "
                                                   "reproduced (confirmatory)"))
    assert len(found) == 1 and "its findings '4 reproduced, 1 inconclusive" in found[0]
    cell = "`few_long_heads_above_R`: reproduced;"
    assert cell in text
    found = resultsdoc.stale(text.replace(cell, "few long heads reproduced;"))
    assert len(found) == 1 and "'reproduced' stands beside no claim" in found[0]


def test_findings_regenerated_with_another_verdict_fail(results):
    text = PAGE.read_text()
    assert resultsdoc.stale(text, results) == []
    _set(results, "results/heads_grid/seeds600", "th_beats_mh_at_8", "inconclusive")
    _set(results, "results/span_limit/seeds800", "adaptive_matches_fixed", "contradicted")
    found = resultsdoc.stale(text, results)
    assert found[0].endswith("a generated block is stale: run python -m bench.resultsdoc")
    assert any("`adaptive_matches_fixed` is reproduced; results/span_limit/seeds800/"
               "findings.csv says contradicted" in f for f in found)
    assert any("`results/heads_grid/seeds600` says '5 reproduced (confirmatory)', its findings "
               "'1 inconclusive, 4 reproduced (confirmatory)'" in f for f in found)
    filled = resultsdoc.fill(text, results)
    assert "| `th_beats_mh_at_8` | 600-607 |" in filled and "| inconclusive | 1/256 (2 of 3) |" \
        in filled


def test_a_claim_or_folder_the_findings_lack_fails():
    found = resultsdoc.stale("**Lead: `results/span_limit/seeds800/`.**\n\n"
                             "1. `no_such_claim`: *reproduced*\n"
                             "| `results/no_such/` | `x`: inconclusive |\n")
    assert found == [
        "docs/results.md:3: `no_such_claim` is no claim of results/span_limit/seeds800/"
        "findings.csv",
        "docs/results.md:4: `x`: inconclusive, but no findings.csv is named"]


def test_p_is_written_exactly():
    assert folders._fraction(3 / 4096, 12) == "3/4096"
    assert folders._fraction(9 / 256, 8.0) == "9/256"
    assert folders._fraction(0.145, 8) == "0.145"
    assert folders._number(-12958.2) == "-12,958" and folders._number(0.926) == "+0.926"
