"""What the dashboard's Playwright tests share: the Streamlit server, the whole-page
screenshot, pressing Run, opening a view, a many-fleet scenario and typing in the sidebar."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STARTUP_S = 30.0
# every element whose text must not be cut: table cells, fleet cards and their KPIs, alerts
CHECKED = "td, th, [data-testid=fleet-card], [data-testid=kpi], [data-testid=kpi] *, [data-testid=stAlert] p"

# Streamlit scrolls its main panel inside the page, so Playwright's full_page shot is only
# the viewport: the whole page is shot by growing the viewport to the tallest scrolled
# content (main panel or sidebar), then restoring it.
CONTENT_HEIGHT_JS = """() => {
  let h = document.documentElement.scrollHeight;
  for (const el of document.querySelectorAll('*')) {
    const overflow = getComputedStyle(el).overflowY;
    if ((overflow === 'auto' || overflow === 'scroll') && el.scrollHeight > el.clientHeight + 1)
      h = Math.max(h, el.getBoundingClientRect().top + el.scrollHeight);
  }
  return Math.ceil(h);
}"""
MAX_SHOT_HEIGHT = 16_000


def whole_page_screenshot(page, path: Path) -> None:
    """The whole page, every chart and table, at the viewport's width."""
    viewport = page.viewport_size
    height = min(page.evaluate(CONTENT_HEIGHT_JS), MAX_SHOT_HEIGHT)
    page.set_viewport_size({"width": viewport["width"], "height": max(height, viewport["height"])})
    page.wait_for_timeout(800)  # plotly relayouts to the new height
    page.screenshot(path=str(path))
    page.set_viewport_size(viewport)
    page.wait_for_timeout(300)


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


def streamlit_server(log_dir: Path):
    """Yield the URL of ``streamlit run app.py`` headless on a free port (its log in
    ``log_dir``); stopped on exit."""
    port = free_port()
    log = open(log_dir / "streamlit.log", "w")
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


def run_and_wait(page) -> float:
    """Press Run; seconds until the fleet cards and a chart are drawn."""
    run = page.get_by_role("button", name="Run", exact=True)
    assert run.is_enabled()
    started = time.monotonic()
    run.click()
    page.locator("[data-testid=fleet-card]").first.wait_for(timeout=60_000)
    page.locator(".js-plotly-plot:visible").first.wait_for(timeout=60_000)
    return time.monotonic() - started


def show_view(page, name: str) -> None:
    page.locator("[data-testid=stButtonGroup]").get_by_text(name, exact=True).click()
    # the app ends every view with a hidden marker naming it: once it names this view, the
    # rerun has drawn the whole view (Streamlit's status widget shows only after a delay,
    # so waiting for it to hide could pass while the previous view was still on screen)
    page.locator(f"[data-testid=view-shown][data-view='{name}']").wait_for(state="attached", timeout=60_000)
    page.locator("[data-testid=stStatusWidget]").wait_for(state="hidden", timeout=30_000)
    if page.locator(".js-plotly-plot:visible").count():
        page.locator(".js-plotly-plot:visible .main-svg").first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)  # let plotly finish drawing


def many_fleets(path: Path, n: int, **fields) -> Path:
    """The default scenario with copies of its fleets appended ('<name>-copy<k>') up to
    ``n`` fleets (n ≥ 3), and top-level ``fields`` replaced."""
    data = yaml.safe_load((ROOT / "scenarios" / "default.yaml").read_text())
    data.update(fields)
    base = data["fleets"]
    data["fleets"] = base + [dict(base[i % len(base)], name=f"{base[i % len(base)]['name']}-copy{i // len(base) + 1}")
                             for i in range(n - len(base))]
    data["name"] = f"default-{n}-fleets"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sidebar_number(page, label: str, value: str) -> None:
    """Type ``value`` into the sidebar's number field ``label``, commit it, and wait for the
    rerun it causes to end (``value`` must differ from the field's). It types only once no
    script run is going: an edit made while the page's first run is still rendering the
    sidebar (a loaded machine) could land in an element that run then replaced, and CI
    once saw the field show its old value after the app had taken the new one."""
    wait_idle(page)
    field = page.locator("[data-testid=stSidebar]").get_by_role("spinbutton", name=label).first
    before = runs_ended(page)
    field.fill(value)
    field.press("Enter")
    wait_for_rerun(page, before)


# Streamlit's app root carries the script's state (data-test-script-state: running,
# notRunning, ...). A watcher counts the runs that ended (a change away from "running"),
# so a test can wait for the rerun its own action caused, however late it starts: a fixed
# pause or the status widget (shown only after a delay) can pass before it starts.
RUNS_ENDED_JS = """() => {
  const app = document.querySelector('[data-testid=stApp]');
  if (window.__dcsimRunsEnded === undefined) {
    window.__dcsimRunsEnded = 0;
    new MutationObserver(records => {
      for (const r of records) if (r.oldValue === 'running') window.__dcsimRunsEnded++;
    }).observe(app, {attributes: true, attributeOldValue: true, attributeFilter: ['data-test-script-state']});
  }
  return window.__dcsimRunsEnded;
}"""
RERUN_DONE_JS = """(n) => window.__dcsimRunsEnded > n &&
  document.querySelector('[data-testid=stApp]').getAttribute('data-test-script-state') === 'notRunning'"""


IDLE_JS = """() => document.querySelector('[data-testid=stApp]')?.getAttribute('data-test-script-state')
  === 'notRunning'"""


def wait_idle(page, timeout_ms: float = 60_000) -> None:
    """Wait until the app has run its script and no run is going."""
    page.wait_for_function(IDLE_JS, timeout=timeout_ms)


def runs_ended(page) -> int:
    """Script runs that ended since the watcher was installed (installed by the first call)."""
    return page.evaluate(RUNS_ENDED_JS)


def wait_for_rerun(page, before: int, timeout_ms: float = 60_000) -> None:
    """Wait until a run ended after ``before`` (:func:`runs_ended`, read before the action)
    and no run is going."""
    page.wait_for_function(RERUN_DONE_JS, arg=before, timeout=timeout_ms)


# Every text a progress bar shows, recorded as the page changes (a poll could miss a bar
# that changes or goes between two looks on a loaded machine).
PROGRESS_WATCH_JS = """() => {
  window.__dcsimProgress = new Set();
  const look = () => document.querySelectorAll('[data-testid=stProgress]')
    .forEach(e => { const t = e.innerText.trim(); if (t) window.__dcsimProgress.add(t); });
  new MutationObserver(look).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


def watch_progress(page) -> None:
    """Start recording every progress bar text (read with :func:`progress_seen`)."""
    page.evaluate(PROGRESS_WATCH_JS)


def progress_seen(page) -> set[str]:
    return set(page.evaluate("() => [...window.__dcsimProgress]"))
