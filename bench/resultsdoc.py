"""Write the verdict tables of docs/results.md from the committed findings, and check every
other verdict the page states against them: each table between `<!-- findings: results/X/ -->`
(one folder or several) and `<!-- /findings -->` is generated from those folders' findings.csv,
never written by hand.

python -m bench.resultsdoc [--check]

Outside the generated tables a verdict word in a table row or a numbered item must stand where
it is checked (`stale`): "`claim`: verdict" (an item's verdict in italics) for a claim of the
folder its row names, else of the folder the paragraph's bold lead names; or a folder's summary
"`results/X/`: 3 reproduced, 1 inconclusive (unverified)", as an experiment's README writes
it (bench.grids).
"""

import argparse
import re
from pathlib import Path

import pandas as pd

from bench.cli import about
from bench.experiment.catalogue import verdicts
from bench.findings.folders import table
from bench.provenance import ROOT

PAGE = ROOT / "docs" / "results.md"
COMMAND = "python -m bench.resultsdoc"
BLOCK = re.compile(r"(<!-- findings: ([^>]*?) -->\n)(.*?)(<!-- /findings -->)", re.S)
WORDS = r"reproduced|contradicted|inconclusive|futile|undecided|withdrawn|not tested|holds|fails"
VERDICT = re.compile(rf"\b({WORDS})\b")
FOLDER = re.compile(r"`(results/[\w./-]+?)/?`")
SUMMARY = re.compile(r"`(results/[\w./-]+?)/?`: ([^;|]*)")
PAIR = re.compile(rf"((?:`[^`]+`(?:, | and )?)+): \*?((?:{WORDS})(?: \(exploratory\))?)\b\*?")
ITEM = re.compile(r"^\d+\. ")
LEAD = re.compile(r"^\*\*(.*?)\*\*")


def fill(text: str, root: Path = ROOT) -> str:
    """`text` with every generated block rewritten from the findings it names."""
    return BLOCK.sub(lambda m: m[1] + table(m[2].split(), root) + m[4], text)


def _claims(folder: str, root: Path) -> dict[str, str] | None:
    """Each claim (and part) of `folder`'s findings.csv and its verdict; None without one."""
    path = root / folder / "findings.csv"
    if not path.is_file():
        return None
    found = pd.read_csv(path)
    return dict(zip(found["claim"], found["verdict"], strict=True))


def stale(text: str, root: Path = ROOT, name: str = "docs/results.md") -> list[str]:
    """Where `text`'s stated verdicts are not its findings': each problem as 'name:line: ...'.
    A generated table not as `fill` writes it, a claim or summary other than its findings.csv
    says, or a verdict word in a table row or numbered item that none of these accounts for."""
    out = [] if fill(text, root) == text else [f"{name}: a generated table is stale: run "
                                              f"{COMMAND}"]
    lead, generated = None, False
    for i, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{i}"
        generated = (generated or line.startswith("<!-- findings:")) and \
            not line.startswith("<!-- /findings")
        if line.startswith("#"):  # a section: its first folder, or none
            lead = f[1] if (f := FOLDER.search(line)) else None
        elif (m := LEAD.match(line)) and (f := FOLDER.search(m[1])):  # a paragraph's lead
            lead = f[1]
        if generated or not (line.startswith("|") or ITEM.match(line)):
            continue
        rest = line
        for m in SUMMARY.finditer(line):
            want = verdicts(root / m[1])
            if want and VERDICT.search(m[2]):
                if not m[2].startswith(want):
                    out.append(f"{where}: `{m[1]}` says '{m[2].strip()}', its findings '{want}'")
                rest = rest.replace(m[0], "")
        named = FOLDER.search(line) if line.startswith("|") else None
        folder = named[1] if named else lead
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
        if word := VERDICT.search(rest):
            out.append(f"{where}: '{word[1]}' stands beside no claim or folder summary")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=about(__doc__))
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a verdict "
                   "docs/results.md states is not its committed findings', naming the line")
    args = p.parse_args(argv)
    text = PAGE.read_text()
    if args.check:
        found = stale(text)
        print("\n".join(found) or "docs/results.md: current")
        return int(bool(found))
    PAGE.write_text(fill(text))
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
