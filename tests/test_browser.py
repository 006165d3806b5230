"""MLflow's UI as a person sees it: headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by selenium) on `mlflow server` over HTTP, serving the store of a
finished small sweep with a claim (examples/add_a_claim.yaml). Each check reads the rendered
page (its text after the UI's JavaScript ran), never the API: the runs page lists the sweep and
its trials, the sweep's page shows every claim's verdict and the findings table, the compare
page of two trials shows the claim's metric for both, and from the home page the verdicts are
one click away, the sweep's report two. Screenshots go beside the sweep's results, in
runs/browser/ (`$ATTNBENCH_RUNS`); docs/tracking.md shows them. SLOW: the sweep is most of
it (39 s alone on the 2-core AMD EPYC); the whole test took 114 s (14 s in the browser) with
the machine's load average at 4 to 8 from other work, 198 s at 11 to 16. Skips only where
Chromium or its driver (or selenium, a dev extra) is absent.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient

from bench.provenance import LOCAL
from bench.tracking import page, store
from tests.test_run import cli_env, mlflow_server, slow

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "examples" / "add_a_claim.yaml"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1800,1100")
WAIT_S = 30  # for a page to render what it should

pytestmark = [slow, pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="no chromium or chromedriver on PATH (Debian: apt-get "
    "install -y chromium chromium-driver; .ci/run installs them)")]
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Path, MlflowClient]]:
    """A finished add_a_claim sweep in runs/browser/, its store served by `mlflow server` on
    127.0.0.1 (a free port): (the server's address, the results folder, a client)."""
    out = LOCAL / "browser"
    shutil.rmtree(out, ignore_errors=True)
    uri = f"sqlite:///{out / 'mlflow.db'}"
    store.open_store(uri)  # tables made before the server and the sweep both open the file
    with tempfile.TemporaryDirectory(prefix="ab", dir="/tmp") as tmp:
        server, base = mlflow_server(out / "mlflow.db", Path(tmp))
        try:
            done = subprocess.run([sys.executable, "-m", "bench.run", str(GRID), "--results-dir",
                                   str(out)], cwd=ROOT, env=cli_env(Path(tmp)),
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
            yield base, out, MlflowClient(uri)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
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


def text(driver) -> str:
    return driver.execute_script("return document.body.innerText")


def shows(driver, url: str | None, wanted: list[str], shot: Path, click: str | None = None
          ) -> str:
    """Open `url` (None: stay), wait until the page's text has every string in `wanted`
    (after clicking the button `click`, where there is one), save a screenshot; fails with
    the page's text otherwise."""
    from selenium.webdriver.common.by import By

    if url is not None:
        driver.get(url)
    deadline, seen = time.time() + WAIT_S, ""
    while time.time() < deadline:
        for button in driver.find_elements(By.XPATH, f"//*[text()='{click}']") if click else []:
            button.click()
        seen = text(driver)
        if all(w in seen for w in wanted):
            break
        time.sleep(0.5)
    for close in driver.find_elements(By.CSS_SELECTOR, "button[aria-label='Close']"):
        close.click()  # the assistant's panel, which covers a third of the page
    driver.save_screenshot(str(shot))
    missing = [w for w in wanted if w not in seen]
    assert not missing, f"{shot.stem}: the page does not show {missing}; it shows:\n{seen}"
    return seen


def pick(driver, keys: list[str]) -> None:
    """On the compare page: the parallel-coordinates plot's params and metrics, cleared, then
    `keys` typed into its two pickers (a param, a metric), as a person picks them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_element(By.XPATH, "//*[text()='Clear All']").click()
    pickers = driver.find_elements(By.CSS_SELECTOR, "input[role='combobox']")
    for picker, key in zip(pickers, keys, strict=True):
        driver.execute_script("arguments[0].focus()", picker)
        picker.send_keys(key)
        time.sleep(0.5)  # the picker's list filters as it is typed into
        picker.send_keys(Keys.ENTER, Keys.ESCAPE)


def test_the_ui_shows_the_sweep_its_report_and_a_comparison(served, browser):
    """The runs page, the sweep's page, the compare page and the path from the home page, as
    rendered; screenshots in runs/browser/."""
    from selenium.webdriver.common.by import By

    base, out, client = served
    exp = client.get_experiment_by_name("add_a_claim").experiment_id
    sweep = client.search_runs([exp], "tags.`attnbench.role` = 'sweep'")[0]
    trials = {r.info.run_name: r.info.run_id for r in client.search_runs(
        [exp], "tags.`attnbench.role` = 'trial'")}
    findings = pd.read_csv(out / "add_a_claim" / "findings.csv")
    assert len(trials) == 10
    # the address the sweep prints: its trials grouped by variant, the claim's metric a column
    shows(browser, store.ui_url(exp, base), [sweep.info.run_name, *trials, "Group: fixed",
                                             "final_test_bpc"], out / "runs.png")
    # the sweep's page: every claim's verdict in the findings table, the paper-style table
    seen = shows(browser, f"{base}/{page.run_url(exp, sweep.info.run_id)}",
                 ["add_a_claim: findings", "Pre-registration", "Results (in shape)",
                  *findings["claim"], *findings["verdict"]], out / "sweep.png", "Show more")
    cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "table th")]
    assert {"claim", "verdict", "effect", "p"} <= set(cells), seen
    # compare two variants' trials of one seed: the claim's metric of both, in the Metrics
    # table and, once picked as docs/tracking.md says, in the parallel-coordinates plot
    pair = ["fixed-s100", "talking-heads-s100"]
    values = [client.get_run(trials[n]).data.metrics["final_test_bpc"] for n in pair]
    runs = json.dumps([trials[n] for n in pair])
    shows(browser, f"{base}/#/compare-runs?runs={runs}&experiments={json.dumps([exp])}&"
          f"{page.TRAINING}", [*pair, "final_test_bpc", *(f"{v:.3f}" for v in values)],
          out / "compare_table.png")
    pick(browser, ["model.variant", "final_test_bpc"])
    shows(browser, None, ["talking-heads", *(f"{v:.5f}" for v in values)], out / "compare.png")
    # from the home page: the verdicts counted in the experiment's description (no click),
    # named on its page (one click) with the links to the report and the grouped trials
    words = [f"{c}: {v}" for c, v in zip(findings["claim"], findings["verdict"], strict=True)]
    counted = f"1 {findings['verdict'].iloc[0]} (sweep-"  # reproduced; exploratory if run dirty
    shows(browser, f"{base}/", ["add_a_claim", counted], out / "home.png")
    browser.find_element(By.LINK_TEXT, "add_a_claim").click()
    shows(browser, None, [*words, "The sweep's report", "Trials by the grid's axes"],
          out / "experiment.png")
    link = browser.find_element(By.LINK_TEXT, "The sweep's report").get_attribute("href")
    assert link.endswith(page.run_url(exp, sweep.info.run_id)), link
