"""What a sweep shows in MLflow's UI (3.17): its run's page is its report, and its experiment's
description says the verdicts and links to that page and to the trials (`view`: the runs table
the sweep's printed address opens).
"""

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric, Run, RunTag
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE
from mlflow.utils.validation import MAX_EXPERIMENT_TAG_VAL_LENGTH, MAX_TAG_VAL_LENGTH
from PIL import Image

from .names import LOOKS, MACHINE, PRECISION, SEEDS_RUN, TRIAL_COUNT, VERDICT
from .view import run_url, view_url


def now() -> int:
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
class Page:
    """The report as the sweep's page shows it: the findings and tables in Markdown, the
    claims' results, where the runs ran and in what precision, the figures, and the folder
    with the whole report."""

    markdown: str
    claims: list[ClaimResult]
    machine: str
    precision: str
    figures: list[Path]
    folder: Path


def cut(text: str, limit: int, pointer: str) -> str:
    """`text`, or where longer than `limit` characters, its paragraphs that fit and `pointer`
    (where the rest is): the store refuses a longer description, which must not fail a sweep."""
    if len(text) <= limit:
        return text
    end = f"\n\n*Cut here: the store keeps {limit:,} characters. {pointer}*"
    head = text[:limit - len(end)]
    return head[:head.rfind("\n\n")] + end if "\n\n" in head else head + end


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
    client.log_batch(parent, metrics=[Metric(TRIAL_COUNT, len(look.trials), now(), k),
                                      Metric(LOOKS, k, now(), k)],
                     tags=[RunTag(TRIAL_COUNT, str(len(look.trials))),
                           RunTag(LOOKS, f"{k} of {look.looks}"),
                           RunTag(SEEDS_RUN, f"{seeds[0]}-{seeds[-1]}" if seeds else "")])


def figures(client: MlflowClient, run_id: str, pngs: list[Path]) -> str:
    """Log each figure as an image of the run (figures/<name>); returns them as Markdown
    images, which the run's description shows (the UI serves artifacts at get-artifact)."""
    shown = []
    for png in pngs:
        with Image.open(png) as image:
            client.log_image(run_id, image, artifact_file=f"figures/{png.name}")
        shown.append(f"![{png.stem}](get-artifact?path=figures%2F{png.name}&run_uuid={run_id})")
    return "\n\n".join(shown)


def publish(client: MlflowClient, sweep: Run, page: Page) -> None:
    """The sweep's page is its report: description (the findings, the tables, the figures),
    each claim's verdict (tag), effect and p (metrics, at the look reached), machine and
    precision (tags); the experiment's description counts the verdicts (the start, which the
    home page shows), names them and links here."""
    run_id, tags = sweep.info.run_id, sweep.data.tags
    step = int(tags.get(LOOKS, "1").split(" of ")[0])
    head = (f"**{tags.get(TRIAL_COUNT, '?')} trials**, look {tags.get(LOOKS, '1 of 1')}, seeds "
            f"{tags.get(SEEDS_RUN, '?')}. The whole report: `{page.folder}` (and the run's "
            "Artifacts, report/).")
    shown = figures(client, run_id, page.figures)
    note = cut(f"{head}\n\n{page.markdown}\n\n{shown}", MAX_TAG_VAL_LENGTH,
               f"The rest is in `{page.folder / 'findings.md'}` and the run's report/ artifacts.")
    client.log_batch(run_id, metrics=[
        Metric(f"{what}.{c.id}", float(v), now(), step) for c in page.claims
        for what, v in (("effect", c.effect), ("p", c.p)) if v == v],  # NaN: not tested
        tags=[RunTag(MLFLOW_RUN_NOTE, note), RunTag(MACHINE, page.machine[:MAX_TAG_VAL_LENGTH]),
              RunTag(PRECISION, page.precision),
              *(RunTag(f"{VERDICT}{c.id}", c.verdict) for c in page.claims)])
    counts = Counter(c.verdict for c in page.claims)
    words = "; ".join(f"{c.id}: {c.verdict}" for c in page.claims)
    exp = sweep.info.experiment_id
    client.set_experiment_tag(exp, MLFLOW_RUN_NOTE, cut(  # the home page shows its start
        f"{', '.join(f'{n} {v}' for v, n in counts.items()) or 'no claims'} "
        f"({sweep.info.run_name}{': ' + words if words else ''}). [The sweep's report]"
        f"({run_url(exp, run_id)}) · [Trials by setting]({view_url(exp)})",
        MAX_EXPERIMENT_TAG_VAL_LENGTH, "The sweep's run has the rest."))
