"""MLflow's UI as a person sees it: headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by selenium) on `mlflow server` over HTTP, serving a store with the
main job's shape: results/heads_grid/seeds300 (48 trials of talking-heads Table 1, 5 claims,
2 looks), its trials logged as the runner logs them from their committed per-seed values
(runs.csv: nothing is trained) under a sweep run that the sweep's own code starts, covers and
reports on (`writer.start_sweep`, `writer.log_trials_covered`, `view.share_view`, `render_sweep`).

Each check reads what the screen shows: a text where it is drawn, inside every box that clips
it (`VISIBLE`; a scrolled box counts as shown, a scroll is not a click), never the page's whole
text. From the address a sweep prints: the training view, the sweep's row first with its trial
count, looks and verdicts, the settings' groups collapsed with their labels whole; one click to
the chart of the claims' metric by setting. On the sweep's page, with no click: the trial and
look counts and every verdict; after *Show more*: Table 1's rows and the claims' figure drawn
as an image. On f61fb0d's page it fails (the report was cut before Table 1, the verdicts sat in
the 18th column, the sweep's row came last). Screenshots go beside the store, in runs/browser/
(`$ATTNBENCH_RUNS`); docs/tracking.md shows them.

SLOW: 90 s on the 2-core AMD EPYC (AVX2 kernels) with other work holding its load average at
5 (33 s building the store and starting the server at once, 44 s in the browser).
Skips only where Chromium or its driver (or selenium, a dev extra) is absent.
"""

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from bench.experiment.claims import METRICS, PROBE_METRIC
from bench.experiment.layouts import display_name
from bench.experiment.open import Overrides, open_grid, read_grid_text, to_text
from bench.findings.presentation import render as report
from bench.findings.reading.records import PLANS, RECORDS
from bench.metrics import FINAL_RENAMED, FINAL_SAME, GRID_KEYS, PLAN
from bench.provenance import LOCAL
from bench.tracking import names, page, store, view, writer
from bench.trial import setting_name
from tests.helpers import mlflow_server

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "results" / "heads_grid" / "seeds300"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1600,1200")
WAIT_S = 300  # a hang guard: a page draws what it should in 2-20 s; `until` stops at it
# Whether an element is drawn where a person sees it: a box, inside every ancestor box that
# clips (overflow hidden or clip; a scrolled one counts as shown), above the fade that the
# UI lays over a collapsed description's lower half, its text not cut by an ellipsis.
VISIBLE = """
const el = arguments[0], r = el.getBoundingClientRect();
if (r.width < 1 || r.height < 1) return false;
if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).textOverflow === 'ellipsis')
  return false;
for (let a = el.parentElement; a; a = a.parentElement) {
  const s = getComputedStyle(a);
  if (s.display === 'none' || s.visibility === 'hidden' || s.opacity === '0') return false;
  if (/hidden|clip/.test(s.overflowX + s.overflowY)) {
    const c = a.getBoundingClientRect();
    if (r.top < c.top - 1 || r.bottom > c.bottom + 1 || r.left < c.left - 1
        || r.right > c.right + 1) return false;
    const fade = a.querySelector(':scope > [data-testid="truncation-gradient"]');
    if (fade && r.bottom > fade.getBoundingClientRect().top + fade.offsetHeight / 2)
      return false;
  }
}
return true;
"""

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="no chromium or chromedriver on PATH (Debian: apt-get "
    "install -y chromium chromium-driver; .ci/run installs them)")]
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")


def _value(v: object) -> object:
    return v.item() if isinstance(v, np.generic) else v


def logged_sweep(uri: str, folder: Path, out: Path) -> str:
    """A committed result's sweep in the store at `uri`, as the runner logs it, without
    training: the sweep run (its grid at the result's seeds, its view, look 1 then look 2),
    each trial of runs.csv a finished run with its params, tags, final metrics and plan, then the
    report (`render_sweep`, into out/<grid>/, onto the sweep's page). Returns the sweep's id."""
    grid_file, runs = folder / "grid.yaml", pd.read_csv(folder / "runs.csv")
    source = read_grid_text(grid_file)  # as bench.run reads it: once
    grid = open_grid(source, Overrides(seed_start=int(runs["seed"].min())))
    axes, looks = list(grid.grid), grid.look_seeds()
    client = store.open_store(uri)
    exp = store.experiment_id(client, grid.name, uri)
    first = list(runs[runs["seed"].isin(looks[0])]["trial"])
    parent = writer.start_sweep(client, exp, source, f"python -m bench.run {grid_file}",
                                page.Look(grid.name, first, 1, len(looks), looks[0]),
                                to_text(grid))
    settings = [setting_name({a: _value(r[a]) for a in axes},
                             display_name(r["model.variant"], grid.report.table))
                for _, r in runs.iterrows()]
    view.share_view(client, exp, axes, [c.metric for c in grid.claims],
                    [c.id for c in grid.claims], list(dict.fromkeys(settings)))
    metrics = [c for c in runs if c in METRICS or c in FINAL_SAME or c in FINAL_RENAMED
               or PROBE_METRIC.match(c)]
    plan = [k for k in RECORDS if k in runs]
    plans = folder / PLANS  # the plan itself, as each trial's run logs it
    for (_, r), setting in zip(runs.iterrows(), settings, strict=True):
        start = int(pd.Timestamp(r["start_time"]).timestamp() * 1000)
        run = client.create_run(exp, run_name=f"{setting}-s{r['seed']}", start_time=start, tags={
            names.ROLE: "trial", names.GRID: grid.name, names.HASH: r["trial"],
            GRID_KEYS: ",".join(axes), names.PARENT: parent, names.SETTING: setting,
            **{PLAN + k: str(_value(r[k])).lower() if isinstance(_value(r[k]), bool)
               else str(_value(r[k])) for k in plan}}).info.run_id
        params = writer.flatten({k: _value(r[k]) for k in runs if pd.notna(r[k]) and k not in
                                 (*metrics, *plan, "trial", "start_time")})
        client.log_batch(run, params=[Param(k, v) for k, v in params.items()], metrics=[
            Metric(f"final_{k}" if k in FINAL_RENAMED else k, float(r[k]), start, int(r["steps"]))
            for k in metrics if pd.notna(r[k])])
        if plans.is_file():
            client.log_text(run, plans.read_text(), PLANS)
        client.set_terminated(run, "FINISHED", end_time=start + 60_000)
    writer.log_trials_covered(client, parent, page.Look(grid.name, list(runs["trial"]),
                                                        len(looks), len(looks), looks[-1]))
    report.render_sweep(uri, grid.name, out / grid.name, parent, grid, source)
    writer.end_sweep(client, parent, "FINISHED")
    return parent


@pytest.fixture(scope="module")
def served(made_store) -> Iterator[tuple[str, Path, MlflowClient, str]]:
    """The main job's store in runs/browser/, served by `mlflow server` on 127.0.0.1 (a free
    port): (the server's address, the results folder, a client, the sweep's run id)."""
    out = LOCAL / "browser"
    shutil.rmtree(out, ignore_errors=True)
    uri = f"sqlite:///{out / 'mlflow.db'}"
    out.mkdir(parents=True)  # tables made before the server and the sweep both open the file
    shutil.copyfile(made_store, out / "mlflow.db")
    with tempfile.TemporaryDirectory(prefix="ab", dir="/tmp") as tmp, \
            ThreadPoolExecutor(1) as pool:
        starting = pool.submit(mlflow_server, out / "mlflow.db", Path(tmp))  # while it starts
        sweep = logged_sweep(uri, RESULT, out)
        server, base = starting.result()
        try:
            yield base, out, MlflowClient(uri), sweep
        finally:  # a throwaway server: no need to wait for its workers' shutdown
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(served) -> Iterator:
    """Chromium driven by selenium, with a fresh profile (the UI keeps its switches there)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    with tempfile.TemporaryDirectory() as profile:
        for flag in (*FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(DRIVER))
        try:
            yield driver
        finally:
            driver.quit()


def until(driver, what: str, check, shot: Path):
    """Wait until `check(driver)` is true (at most WAIT_S), with the assistant's panel closed
    (it covers a third of the page); save a screenshot; fail saying `what` otherwise."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    deadline, ok = time.time() + WAIT_S, False
    while time.time() < deadline and not ok:
        for close in driver.find_elements(By.CSS_SELECTOR, "button[aria-label='Close']"):
            close.click()
        try:
            ok = bool(check(driver))
        except WebDriverException:  # the page re-rendered under the check
            ok = False
        if not ok:
            time.sleep(0.5)
    driver.save_screenshot(str(shot))
    assert ok, f"{shot.stem}: {what} is not shown"
    return ok


def shown(driver, element) -> bool:
    return driver.execute_script(VISIBLE, element)


def xpath(text: str) -> str:
    return f"//*[normalize-space(text())={text!r}]"


def rows(driver) -> list[str]:
    """The runs table's rows as drawn, top to bottom: each row's visible cells' text."""
    from selenium.webdriver.common.by import By

    out: dict[int, list[str]] = {}
    for row in driver.find_elements(By.CSS_SELECTOR, ".ag-row"):
        cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, ".ag-cell")
                 if c.text.strip() and shown(driver, c)]
        out.setdefault(int(row.get_attribute("row-index")), []).extend(cells)
    return [" | ".join(out[i]) for i in sorted(out)]


def training(driver) -> bool:
    """The UI's switch shows *Model training* chosen: its label drawn darker than GenAI's."""
    def ink(label: str) -> int:
        from selenium.webdriver.common.by import By

        color = driver.find_element(By.XPATH, xpath(label)).value_of_css_property("color")
        return sum(int(c) for c in color[color.index("(") + 1:].split(",")[:3])

    return ink("Model training") < ink("GenAI")


def printed_address(browser, base: str, run, out: Path) -> None:
    """The address the sweep prints: the training view, the sweep's row first with its counts
    and verdicts, then a collapsed group per setting, its label whole, and the claims' metric
    named whole; one click on: the chart view, the claims' metric of each setting."""
    from selenium.webdriver.common.by import By

    browser.get(store.ui_url(run.info.experiment_id, base))
    settings = [f"Group: {v}-n_heads={h}" for v in ("multi-head", "talking-heads")
                for h in (2, 4, 8)]
    until(browser, "the sweep's row first, then every setting's group collapsed",
          lambda d: len(table := rows(d)) == 8 and run.info.run_name in table[1]
          and all(s in " ".join(table[2:]) for s in settings), out / "runs.png")
    table = rows(browser)
    assert "Group: sweep" in table[0] and "48 | 2 of 2 | reproduced" in table[1], table
    assert training(browser)
    for label in settings:  # readable: drawn whole, not cut
        name = label.removeprefix("Group: ")
        assert shown(browser, browser.find_element(By.XPATH, f"//*[contains(text(), {name!r})]"))
    assert shown(browser, browser.find_element(By.XPATH, xpath("test_probe_bpc.recall")))
    browser.find_element(By.CSS_SELECTOR, "input[value='CHART']").find_element(
        By.XPATH, "./ancestor::label[1]").click()
    until(browser, "the chart of the claims' metric by setting", lambda d: shown(
        d, d.find_element(By.XPATH, xpath("test_probe_bpc.recall by setting"))) and len(
        d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= 2, out / "chart.png")


def sweeps_page(browser, base: str, run, verdicts: dict[str, str], table1: list[str],
                out: Path) -> None:
    """The sweep's page: with no click, the trial and look counts and every claim's verdict
    (`verdicts`) in the description's first lines; one click on *Show more*: Table 1's rows
    (`table1`: their labels) and the claims' figure, drawn as an image."""
    from selenium.webdriver.common.by import By

    browser.get(f"{base}/{view.run_url(run.info.experiment_id, run.info.run_id)}")
    first = "//*[@data-testid='truncation-gradient']/..//p[1]"

    def said(d) -> bool:
        lead = d.find_element(By.XPATH, first)
        words = [lead.find_elements(By.XPATH, f"./strong[normalize-space(.)={v!r}]"
                                    f"[preceding-sibling::text()[1][contains(., {c + ' '!r})]]")
                 for c, v in verdicts.items()]
        return shown(d, lead.find_element(By.XPATH, "./strong[1]")) and all(
            len(w) == 1 and shown(d, w[0]) for w in words)

    until(browser, "every verdict before any click", said, out / "sweep.png")
    lead = browser.find_element(By.XPATH, first).text
    assert lead.startswith("48 trials, look 2 of 2, seeds 300-307: ")
    assert all(f"{c} {v}" in lead for c, v in verdicts.items()), lead
    browser.find_element(By.XPATH, xpath("Show more")).click()

    def drawn(d) -> bool:
        cells = [d.find_element(By.XPATH, f"//td[normalize-space(.)={label!r}]")
                 for label in table1]
        figure = d.find_element(By.CSS_SELECTOR, "img[src*='claims_per_seed']")
        d.execute_script("arguments[0].scrollIntoView({block: 'end'})", figure)
        return all(shown(d, c) for c in cells) and shown(d, figure) and d.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth", figure) > 0

    until(browser, "Table 1's rows and the claims' figure", drawn, out / "report.png")


def test_the_ui_shows_the_main_jobs_report_and_its_comparison(served, browser):
    """From the printed address and on the sweep's page, what a person sees (above); the
    screenshots in runs/browser/."""
    base, out, client, sweep = served
    run = client.get_run(sweep)
    findings = pd.read_csv(out / "heads_grid" / "findings.csv")
    verdicts = dict(zip(findings["claim"], findings["verdict"], strict=True))
    assert len(verdicts) == 5 and run.data.tags["looks"] == "2 of 2"
    table1 = [line.split("|")[1].strip() for line in (out / "heads_grid" / "th_table1.md")
              .read_text().splitlines() if line.startswith("|")][2:]
    assert table1[0] == "multi-head h=2" and table1[-1] == "talking-heads h=8"
    printed_address(browser, base, run, out)
    sweeps_page(browser, base, run, verdicts, table1, out)
