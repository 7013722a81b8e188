"""The dashboard in a real browser: ``streamlit run app.py`` headless on a free port,
driven by Debian's Chromium through Playwright. Loads the page, changes a control, runs
the default scenario, waits for the KPI cards and a plotly chart, saves a screenshot.

With ``DCSIM_SCREENSHOTS=DIR`` it also saves the main page and the roofline view to DIR
(how ``docs/dashboard-*.png`` are made)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 30.0

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, server: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"streamlit did not answer on {url} within {timeout_s:g} s")


@pytest.fixture
def server(tmp_path):
    port = free_port()
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, STARTUP_S)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def page():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: `make browser` installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1600, "height": 1000})
        finally:
            browser.close()


def show_view(page, name: str) -> None:
    page.locator("[data-testid=stButtonGroup]").get_by_text(name, exact=True).click()
    page.locator(".js-plotly-plot:visible").first.wait_for(timeout=30_000)
    time.sleep(1.0)  # let plotly finish drawing


def test_run_the_default_scenario_in_a_browser(server, page, tmp_path):
    page.goto(server)
    run = page.get_by_role("button", name="Run")
    run.wait_for(timeout=30_000)
    # change a control: open the run settings, set the seed
    page.locator("[data-testid=stSidebar]").get_by_text("run", exact=True).click()
    seed = page.get_by_label("seed")
    seed.fill("43")
    seed.press("Enter")
    page.wait_for_timeout(1500)  # the rerun after the edit
    assert run.is_enabled()
    run.click()
    page.locator("[data-testid=stMetric]").first.wait_for(timeout=30_000)
    page.locator(".js-plotly-plot:visible").first.wait_for(timeout=30_000)
    assert page.locator("[data-testid=stMetric]").count() >= 3 * 5  # three fleets' cards
    page.get_by_text("seed 43,").first.wait_for(timeout=5_000)  # the edited scenario ran
    assert page.locator("[data-testid=stException]").count() == 0
    time.sleep(1.0)
    page.screenshot(path=str(tmp_path / "dashboard.png"))
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    docs = os.environ.get("DCSIM_SCREENSHOTS")
    if docs:
        page.screenshot(path=str(Path(docs) / "dashboard-main.png"))
        show_view(page, "Roofline")
        page.screenshot(path=str(Path(docs) / "dashboard-roofline.png"))
