"""Write the verdicts that README.md and docs/results.md state from the committed findings, and
check every other verdict they state against them: each table between
`<!-- findings: results/X/ -->` (one folder or several) and `<!-- /findings -->`, and each
sentence between `<!-- verdicts: results/X/ -->` and `<!-- /verdicts -->` (a sentence per
folder: its seeds, evidence and claims by verdict and look), is generated from those folders'
findings.csv, never written by hand.

python -m bench.resultsdoc [--check]

Outside the generated blocks a verdict must stand where it is checked (`stale`): "`claim`:
verdict" (an item's verdict in italics) for a claim of the folder its row names, else of the
folder the paragraph's bold lead names; or a folder's summary "`results/X/`: 3 reproduced, 1
inconclusive (unverified)", as an experiment's README writes it (bench.grids). Any other
verdict word in a table row or numbered item, and any other sentence that gives a verdict or
an evidence word (reproduced, inconclusive, confirmatory, ...; code spans aside) about a
results folder, is refused: it would say what no findings.csv is asked about. A sentence is
about a folder where it names one or a seed range, or stands under a heading or bold lead
that names one.
"""

import argparse
import re
from pathlib import Path

import pandas as pd

from bench.cli import about
from bench.experiment.catalogue import verdicts
from bench.findings.presentation.folders import sentence, table
from bench.provenance import ROOT

PAGES = (ROOT / "README.md", ROOT / "docs" / "results.md")
COMMAND = "python -m bench.resultsdoc"
BLOCK = re.compile(r"(<!-- findings: ([^>]*?) -->\n)(.*?)(<!-- /findings -->)", re.S)
SAID = re.compile(r"(<!-- verdicts: ([^>]*?) -->\n)(.*?)(<!-- /verdicts -->)", re.S)
WORDS = r"reproduced|contradicted|inconclusive|futile|undecided|withdrawn|not tested|holds|fails"
VERDICT = re.compile(rf"\b({WORDS})\b")
# in prose: the verdict words, the evidence words and their kin, about a folder or seed range
PROSE = re.compile(rf"\b({WORDS}|confirmatory|exploratory|unverified|confirmed)\b", re.I)
ABOUT = re.compile(r"`?results/[\w*./-]+|\bseeds? \d+\b|\b\d{3}-\d{3}\b", re.I)
FOLDER = re.compile(r"`(results/[\w./-]+?)/?`")
SUMMARY = re.compile(r"`(results/[\w./-]+?)/?`: ([^;|]*)")
PAIR = re.compile(rf"((?:`[^`]+`(?:,\s+|\s+and\s+)?)+):\s+\*?((?:{WORDS})"
                  r"(?: \(exploratory\))?)\b\*?")
ITEM = re.compile(r"^\d+\. ")
LEAD = re.compile(r"^\*\*(.*?)\*\*")
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[])")


def fill(text: str, root: Path = ROOT) -> str:
    """`text` with every generated block rewritten from the findings it names."""
    text = BLOCK.sub(lambda m: m[1] + table(m[2].split(), root) + m[4], text)
    return SAID.sub(lambda m: m[1] + "".join(f"{sentence(f, root)}\n" for f in m[2].split())
                    + m[4], text)


def _claims(folder: str, root: Path) -> dict[str, str] | None:
    """Each claim (and part) of `folder`'s findings.csv and its verdict; None without one."""
    path = root / folder / "findings.csv"
    if not path.is_file():
        return None
    found = pd.read_csv(path)
    return dict(zip(found["claim"], found["verdict"], strict=True))


def _units(text: str) -> list[tuple[int, str, bool]]:
    """The text outside the generated blocks and code blocks as units, each (first line,
    text, whether a table row or numbered item): a table row, an item with its continuation
    lines, or a paragraph; headings their own unit."""
    out: list[tuple[int, str, bool]] = []
    skip, fence = False, False
    for i, line in enumerate(text.splitlines(), 1):
        fence ^= line.startswith("```")
        skip = (skip or line.startswith(("<!-- findings:", "<!-- verdicts:"))) and not \
            line.startswith(("<!-- /findings", "<!-- /verdicts"))
        if skip or fence or line.startswith(("```", "<!--")) or not line.strip():
            out.append((i, "", False))
        elif line.startswith(("|", "#", "- ")) or ITEM.match(line) or not out \
                or not out[-1][1] or out[-1][1].startswith(("|", "#")):
            out.append((i, line, line.startswith("|") or bool(ITEM.match(line))))
        else:
            at, said, listed = out[-1]
            out[-1] = (at, f"{said}\n{line}", listed)
    return [u for u in out if u[1]]


def _checked(rest: str, folder: str | None, root: Path, where: str) -> tuple[str, list[str]]:
    """`rest` less its folder summaries and `claim`: verdict pairs (`folder` the pairs'
    findings), and where one of them is not its findings.csv's."""
    out = []
    for m in SUMMARY.finditer(rest):
        want = verdicts(root / m[1])
        if want and VERDICT.search(m[2]):
            if not m[2].startswith(want):
                out.append(f"{where}: `{m[1]}` says '{m[2].strip()}', its findings '{want}'")
            rest = rest.replace(m[0], "")
    for m in PAIR.finditer(rest):
        found = _claims(folder, root) if folder else None
        for claim in re.findall(r"`([^`]+)`", m[1]):
            if found is None:
                out.append(f"{where}: `{claim}`: {m[2]}, but no findings.csv is named")
            elif claim not in found:
                out.append(f"{where}: `{claim}` is no claim of {folder}/findings.csv")
            elif found[claim] != m[2]:
                out.append(f"{where}: `{claim}` is {m[2]}; {folder}/findings.csv says "
                           f"{found[claim]}")
        rest = rest.replace(m[0], "")
    return rest, out


def stale(text: str, root: Path = ROOT, name: str = "docs/results.md") -> list[str]:
    """Where `text`'s stated verdicts are not its findings': each problem as 'name:line: ...'.
    A generated block not as `fill` writes it, a claim or summary other than its findings.csv
    says, a verdict word in a table row or numbered item that none of these accounts for, or a
    sentence that gives a verdict or evidence word about a results folder outside them (module
    doc)."""
    out = [] if fill(text, root) == text else [f"{name}: a generated block is stale: run "
                                              f"{COMMAND}"]
    lead = None
    for at, unit, listed in _units(text):
        if unit.startswith("#"):  # a section: its first folder, or none
            lead = f[1] if (f := FOLDER.search(unit)) else None
        elif (m := LEAD.match(unit)) and (f := FOLDER.search(m[1])):  # a paragraph's lead
            lead = f[1]
        named = FOLDER.search(unit) if unit.startswith("|") else None
        rest, found = _checked(unit, named[1] if named else lead, root, f"{name}:{at}")
        out += found
        if listed and (word := VERDICT.search(rest)):
            out.append(f"{name}:{at + rest[:word.start()].count(chr(10))}: '{word[1]}' stands "
                       "beside no claim or folder summary")
            continue
        start = 0
        for part in SENTENCE.split(rest):
            start = rest.index(part, start)
            word = PROSE.search(re.sub(r"`[^`]*`", "", part))  # code spans aside
            if word and (lead or ABOUT.search(part)):
                out.append(f"{name}:{at + rest[:start].count(chr(10))}: '{word[1]}' said of a "
                           f"results folder or seed range outside a generated block ('<!-- "
                           f"verdicts: results/... -->', {COMMAND}): "
                           f"{' '.join(part.split())[:80]!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=about(__doc__))
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a verdict "
                   "README.md or docs/results.md states is not its committed findings', "
                   "naming the line")
    args = p.parse_args(argv)
    found = []
    for page in PAGES:
        text, name = page.read_text(), page.relative_to(ROOT).as_posix()
        if args.check:
            found += stale(text, ROOT, name)
        else:
            page.write_text(fill(text))
            print(f"wrote {name}")
    if args.check:
        print("\n".join(found) or "README.md, docs/results.md: current")
    return int(bool(found))


if __name__ == "__main__":
    raise SystemExit(main())
