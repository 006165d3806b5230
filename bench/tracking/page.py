"""What a sweep shows in MLflow's UI (3.17): its run's page is its report, read top to bottom,
and its experiment's description lists the verdicts and links to that page and to the trials
(`view`: the runs table the sweep's printed address opens).

The run's description, the page's first part, is cut by the store at MAX_TAG_VAL_LENGTH
characters and shown by the UI in a box 100 px high until *Show more* is pressed; the run's
tags are shown beside it. So the description opens with one paragraph that counts the trials
and looks and names every verdict, then a line per claim, the registration line, the
paper-style tables and the figures (images of the run, which the UI's Markdown shows from its
get-artifact address, checked in Chromium), and links the whole report (an artifact). A part
that does not fit the store's limit is left out with a line that names it and links it; the
figures and the claims' lines stay.
"""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from mlflow import MlflowClient
from mlflow.entities import Metric, Run, RunTag
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE
from mlflow.utils.validation import MAX_EXPERIMENT_TAG_VAL_LENGTH, MAX_TAG_VAL_LENGTH
from PIL import Image

from .names import LOOKS, MACHINE, PRECISION, SEEDS_RUN, TRIAL_COUNT, VERDICT
from .view import TRAINING, run_url, view_url

SHOWN_PX = 800  # the widest a figure is shown on the page (its file keeps the paper's DPI)
REPORT = "report"  # the sweep run's artifact folder with its report's files (`writer.log_report`)


def epoch_ms() -> int:
    """MLflow's timestamp of a metric: milliseconds since the epoch."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ClaimResult:
    """One claim's row of the findings, as the sweep's run records it."""

    id: str
    verdict: str
    effect: float
    p: float


@dataclass(frozen=True)
class Part:
    """A part of the page between the claims' lines and the figures (the registration line, a
    paper-style table): its Markdown and, for the line that says it was left out, what it is
    and the run's artifact that holds it."""

    markdown: str
    what: str
    artifact: str


@dataclass(frozen=True)
class Page:
    """The report as the sweep's page shows it: the claims' results, their lines (a Markdown
    table: header, rule, a row per claim), the parts below them, where the runs ran and in
    what precision, the figures, the run's artifact that the page links as the whole report
    (findings.md), and the folder with every file of it."""

    claims: list[ClaimResult]
    lines: list[str]
    parts: list[Part]
    machine: str
    precision: str
    figures: list[Path]
    whole: str
    folder: Path


def artifact_url(exp: str, run_id: str, path: str) -> str:
    """A run's artifact, shown on its Artifacts tab (an address within the UI)."""
    return f"#/experiments/{exp}/runs/{run_id}/artifacts/{path}?{TRAINING}"


def within_limit(text: str, limit: int, pointer: str) -> str:
    """`text`, or where longer than `limit` characters, its paragraphs that fit and `pointer`
    (where the rest is): the store refuses a longer description, which must not fail a sweep."""
    if len(text) <= limit:
        return text
    end = f"\n\n*Cut here: the store keeps {limit:,} characters. {pointer}*"
    head = text[:limit - len(end)]
    return head[:head.rfind("\n\n")] + end if "\n\n" in head else head + end


def compose(page: Page, head: str, shown: str, link: Callable[[str], str], limit: int) -> str:
    """The description: `head`, the claims' lines, each part, the figures (`shown`) and a link
    to the whole report (`link`: an artifact's address within the UI), within `limit`
    characters: the head, the figures and the link are kept, then as many claims' lines as fit,
    and a part that does not fit is replaced by a line naming it and linking its artifact."""
    def left(what: str, artifact: str) -> str:
        return (f"*Left out here (the store keeps {limit:,} characters): {what}, "
                f"[{artifact}]({link(artifact)}).*")

    tail = (f"The whole report, one click away: [{page.whole}]({link(page.whole)}) (the "
            "claims' texts, reasons, offsets and unlearned counts). Every file of it: "
            f"`{page.folder}` and the run's Artifacts.")
    room = limit - sum(len(block) + 2 for block in (head, shown, tail))
    rows = page.lines[:2]
    for i, row in enumerate(page.lines[2:]):
        rest = left(f"claims {i + 1} to {len(page.lines) - 2}", page.whole)
        if sum(len(r) + 1 for r in (*rows, row)) + len(rest) + 2 > room:
            rows.append(f"\n{rest}")
            break
        rows.append(row)
    blocks = ["\n".join(rows)] if page.claims else []
    room -= sum(len(b) + 2 for b in blocks)
    for part in page.parts:
        blocks.append(part.markdown if len(part.markdown) + 2 <= room else
                      left(part.what, part.artifact))
        room -= len(blocks[-1]) + 2
    return within_limit("\n\n".join([head, *blocks, shown, tail]), limit,
                        f"The rest: {page.folder}.")


@dataclass(frozen=True)
class Look:
    """What a sweep covers so far: its grid, the hashes of its trials, the look reached (from
    1) of how many, and the seeds of the looks so far."""

    grid: str
    trials: list[str]
    look: int
    looks: int
    seeds: list[int]


def progress(client: MlflowClient, parent: str, look: Look) -> None:
    """What the sweep has run so far, at each look: trials, looks reached, seeds (tags, which
    a later look rewrites; the trials and the look also as metrics, a step per look)."""
    k, seeds = look.look, look.seeds
    client.log_batch(parent, metrics=[Metric(TRIAL_COUNT, len(look.trials), epoch_ms(), k),
                                      Metric(LOOKS, k, epoch_ms(), k)],
                     tags=[RunTag(TRIAL_COUNT, str(len(look.trials))),
                           RunTag(LOOKS, f"{k} of {look.looks}"),
                           RunTag(SEEDS_RUN, f"{seeds[0]}-{seeds[-1]}" if seeds else "")])


def figures(client: MlflowClient, run_id: str, pngs: list[Path]) -> str:
    """Log each figure as an image of the run (figures/<name>), at most SHOWN_PX wide; returns
    them as Markdown images, which the run's description shows (the UI serves artifacts at
    get-artifact)."""
    shown = []
    for png in pngs:
        with Image.open(png) as image:
            image.thumbnail((SHOWN_PX, SHOWN_PX * 4))  # the page's width; the file keeps DPI
            client.log_image(run_id, image, artifact_file=f"figures/{png.name}")
        shown.append(f"![{png.stem}](get-artifact?path=figures%2F{quote(png.name)}"
                     f"&run_uuid={run_id})")
    return "\n\n".join(shown)


def verdicts_line(claims: list[ClaimResult]) -> str:
    """Every claim's verdict in one line: `id` **verdict** · ..."""
    return " · ".join(f"{c.id} **{c.verdict}**" for c in claims)


def publish(client: MlflowClient, sweep: Run, page: Page) -> None:
    """The sweep's page is its report: description (`compose`), each claim's verdict (tag),
    effect and p (metrics, at the look reached), machine and precision (tags); the
    experiment's description counts the verdicts, lists them and links here."""
    run_id, tags = sweep.info.run_id, sweep.data.tags
    step = int(tags.get(LOOKS, "1").split(" of ")[0])
    exp = sweep.info.experiment_id
    head = (f"**{tags.get(TRIAL_COUNT, '?')} trials**, look {tags.get(LOOKS, '1 of 1')}, seeds "
            f"{tags.get(SEEDS_RUN, '?')}" + (f": {verdicts_line(page.claims)}." if page.claims
                                             else "."))
    note = compose(page, head, figures(client, run_id, page.figures),
                   lambda path: artifact_url(exp, run_id, path), MAX_TAG_VAL_LENGTH)
    client.log_batch(run_id, metrics=[
        Metric(f"{what}.{c.id}", float(v), epoch_ms(), step) for c in page.claims
        for what, v in (("effect", c.effect), ("p", c.p)) if v == v],  # NaN: not tested
        tags=[RunTag(MLFLOW_RUN_NOTE, note), RunTag(MACHINE, page.machine[:MAX_TAG_VAL_LENGTH]),
              RunTag(PRECISION, page.precision),
              *(RunTag(f"{VERDICT}{c.id}", c.verdict) for c in page.claims)])
    counts = Counter(c.verdict for c in page.claims)
    # the experiment's description, whose start the home page shows
    client.set_experiment_tag(exp, MLFLOW_RUN_NOTE, within_limit(
        f"{', '.join(f'{n} {v}' for v, n in counts.items()) or 'no claims'} "
        f"({sweep.info.run_name}) · [The sweep's report]({run_url(exp, run_id)}) · "
        f"[Trials by setting]({view_url(exp)})\n\n"
        + "\n".join(f"- {c.id}: {c.verdict}" for c in page.claims),
        MAX_EXPERIMENT_TAG_VAL_LENGTH, "The sweep's run has the rest."))
