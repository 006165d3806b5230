"""The experiment's view of its runs in MLflow's UI (3.17), which the address a sweep prints
opens: the runs table with the sweep's row first, its verdicts, trials and looks as columns, the
trials in a collapsed group per setting, and in the chart view the claims' metric by setting.

The UI reads a view from the experiment tag `mlflow.sharedViewState.<key>` (JSON: the runs
table's search and state) when its address carries `viewStateShareKey=<key>`; it opens an
experiment's pages as model training, not GenAI, only where the address says
`workflowType=machine_learning` (or its switch was clicked: the kind tag does not decide it).
What the view cannot hold (read in the UI's bundle): pinned rows, a number format, a header's
name, a group's label other than the grouping values. So the trials are grouped by one tag,
their setting (SETTING: a readable label; a group of several params is labelled by each
param's full name, which the column cuts), and the sweep's run carries the same tag with its
own value (SWEEPS), in a group of its own that the sort puts first: the runs are sorted by the
sweep's trial count, which only sweeps have, and the UI orders groups as their first runs come.
"""

import json
import uuid

from mlflow import MlflowClient

from .names import LOOKS, SETTING, SWEEPS, TRIAL_COUNT, VERDICT

TRAINING = "workflowType=machine_learning"  # the UI's model-training pages
VIEW = "trials"  # the share key of the experiment's view of its trials
SHARED = "mlflow.sharedViewState."  # + key: a view of the runs table (the UI's own prefix)
NAME = "attributes.`Run Name`"  # the runs table's column of names and group labels
FIXED = ("runDateAndNestInfo", "duration")  # the columns it always shows: created, duration
VALUE = len("0.00621640351448837 (average)")  # a metric as the table prints it, in full


def run_url(exp: str, run_id: str) -> str:
    """A run's page, in the model-training view (an address within the UI)."""
    return f"#/experiments/{exp}/runs/{run_id}?{TRAINING}"


def view_url(exp: str) -> str:
    """The experiment's runs as `share_view` set them (an address within the UI)."""
    return f"#/experiments/{exp}/runs?{TRAINING}&viewStateShareKey={VIEW}"


def _width(chars: int) -> int:
    """Pixels a column of the runs table needs to show `chars` characters whole: measured in
    Chromium at the UI's 13 px font, its padding and sort mark included."""
    return 7 * chars + 32


def _charts(metrics: list[str], axis: str | None, shown: int) -> tuple[list[dict], list[dict]]:
    """The chart view's first section per claim metric: a bar per setting (its seeds' mean, in
    the table's order) and, where the grid has an axis besides the variant, the metric against
    it, a point per setting; `shown` settings at the most (the UI shows 10 by default)."""
    charts, sections = [], []
    for metric in metrics:
        section = str(uuid.uuid5(uuid.NAMESPACE_URL, f"attnbench/{metric}"))
        sections.append({"uuid": section, "name": f"{metric} by setting", "display": True,
                         "isReordered": False, "deleted": False, "isGenerated": False})
        card = {"runsCountToCompare": shown, "metricSectionId": section, "deleted": False,
                "isGenerated": False}
        charts.append({**card, "uuid": str(uuid.uuid5(uuid.UUID(section), "bar")),
                       "type": "BAR", "metricKey": metric, "displayName": metric})
        if axis is not None:
            charts.append({**card, "uuid": str(uuid.uuid5(uuid.UUID(section), "scatter")),
                           "type": "SCATTER", "displayName": f"{metric} against {axis}",
                           "xaxis": {"key": axis, "type": "PARAM"},
                           "yaxis": {"key": metric, "type": "METRIC"}})
    return charts, sections


def view_state(axes: list[str], metrics: list[str], claims: list[str],
               settings: list[str]) -> dict:
    """The runs table: the sweeps' group first and open, then a collapsed group per trial
    setting (`settings`: the SETTING tags of the grid's trials), each labelled by its setting;
    as columns, sized to show their names whole: the claims' `metrics` (a group's row: its
    seeds' mean), the trials and looks, and each claim's verdict (the sweep's tags); every
    run in the charts, and the chart view opening on the claims' metrics by setting
    (`_charts`, against the first of the grid's `axes` besides the variant)."""
    metrics = list(dict.fromkeys(metrics))
    headers = [*metrics, TRIAL_COUNT, LOOKS, *(f"{VERDICT}{c}" for c in claims)]
    columns = [*(f"metrics.`{m}`" for m in metrics),
               *(f"tags.`{t}`" for t in headers[len(metrics):])]
    label = max([SWEEPS, *settings], key=len)
    charts, sections = _charts(metrics, next((a for a in axes if a != "model.variant"), None),
                               max(10, len(set(settings)) + 1))
    return {"orderByKey": f"metrics.`{TRIAL_COUNT}`", "orderByAsc": False,
            "selectedColumns": columns,  # the UI applies widths to the columns it is given in
            "columnOrder": [NAME, *columns, *FIXED],  # order, every one shown included
            "columnWidths": {NAME: _width(len(f"Group: {label}")) + 70,  # expander, count
                             **{c: _width(max(len(h), VALUE if c.startswith("metrics.") else 0))
                                for c, h in zip(columns, headers, strict=True)}},
            "groupBy": {"aggregateFunction": "average",
                        "groupByKeys": [{"mode": "tag", "groupByData": SETTING}]},
            "groupsExpanded": {f"tag.{SETTING}.{s}": False for s in settings},
            "runsHiddenMode": "SHOW_ALL", "compareRunCharts": charts,
            "compareRunSections": sections, "isAccordionReordered": True}


def share_view(client: MlflowClient, exp: str, axes: list[str], metrics: list[str],
               claims: list[str], settings: list[str]) -> None:
    """Keep `view_state` in the experiment, where `view_url` finds it."""
    client.set_experiment_tag(exp, SHARED + VIEW,
                              json.dumps(view_state(axes, metrics, claims, settings)))
