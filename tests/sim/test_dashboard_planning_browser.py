"""Issue 28's acceptance walk in a real browser, at 3, 5 and 8 fleets: a new fleet of one
pool made in the table (explained, the edit kept), a bad value and a huge rate (each
blocks Run with its reason), Size to SLO (budget stated, result, the winners applied as a
new fleet) and the capacity-curves view. After every step no table cell, card or alert
may clip its text (scroll width above client width).

The scenario is the default one with its fleets copied up to n and 60 s of arrivals, so
each simulation of the Size-to-SLO search is short; the search has a 20 s budget. Every
wait is on a condition (an alert's text, the view's end marker, a sidebar label), never a
fixed sleep. With ``DCSIM_SCREENSHOTS=DIR`` the Size-to-SLO and curves views are saved
whole as ``DIR/dashboard-size-to-slo-<n>fleets.png`` and ``DIR/dashboard-curves-<n>fleets.png``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect
from browser_cases import CLIPPED_JS, launched_chromium
from dashboard_browser_cases import CHECKED, many_fleets, sidebar_number, streamlit_server, whole_page_screenshot

BUDGET_S = 20
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from streamlit_server(tmp_path_factory.mktemp("streamlit"))


@pytest.fixture(scope="module")
def browser():
    yield from launched_chromium()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    try:
        yield context.new_page()
    finally:
        context.close()


def no_clipped_text(page, step: str) -> None:
    assert page.locator("[data-testid=stException]").count() == 0, step
    clipped = page.evaluate(CLIPPED_JS, CHECKED)
    assert not clipped, (step, clipped[:10])


def upload(page, path: Path) -> None:
    page.locator("[data-testid=stSidebar] [data-testid=stSelectbox]").first.click()
    page.get_by_role("option", name="upload a scenario…").click()
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(str(path))
    page.get_by_text(path.name).wait_for(timeout=30_000)
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled(timeout=30_000)


def open_view(page, name: str) -> None:
    """Click the view and wait for its end marker (drawn last by the app)."""
    page.locator("[data-testid=stButtonGroup]").get_by_text(name, exact=True).click()
    page.locator(f"[data-testid=view-shown][data-view='{name}']").wait_for(state="attached", timeout=60_000)


def one_pool_fleet_in_the_table(page) -> None:
    """Rename the first row's fleet: a new fleet of one pool, refused with its reason."""
    page.get_by_text("Fleets and pools as a table", exact=False).click()
    grid = page.locator("[data-testid=stDataFrame]").first
    grid.locator("td[role=gridcell]", has_text="all-h100").first.wait_for(state="attached", timeout=30_000)
    # the first row's fleet cell (header 35 px, row 35 px); the locator's click waits until the grid
    # is visible and stable (the expander's opening animation over), unlike raw mouse coordinates
    grid.dblclick(position={"x": 40, "y": 35 + 17})
    editor = page.locator("textarea.gdg-input, input.gdg-input").first
    editor.wait_for(timeout=30_000)
    editor.fill("one-pool")
    editor.press("Enter")
    grid.locator("td[role=gridcell]", has_text="one-pool").first.wait_for(state="attached", timeout=30_000)
    page.get_by_text("The table has edits not applied yet").wait_for(timeout=30_000)  # the server has the edit
    page.get_by_role("button", name="apply table").click()
    page.locator("[data-testid=stAlert]").filter(has_text="The table was not applied").wait_for(timeout=30_000)
    assert grid.locator("td[role=gridcell]", has_text="one-pool").count() >= 1  # the edit kept
    no_clipped_text(page, "table")


def bad_value_and_huge_rate(page) -> None:
    """Replicas 0, then 10 million req/s: each blocks Run with its reason; each is then
    typed back (a widget edit, so no double rerun for a later keystroke to race with)."""
    run = page.get_by_role("button", name="Run", exact=True)
    sidebar = page.locator("[data-testid=stSidebar]")
    sidebar.get_by_text("hardware mix", exact=True).click()
    sidebar_number(page, "replicas", "0")
    error = page.get_by_text("replicas must be a whole number ≥ 1 (got 0)")
    error.first.wait_for(timeout=30_000)
    assert run.is_disabled()
    no_clipped_text(page, "bad value")
    sidebar_number(page, "replicas", "2")  # all-h100's chat pool as written
    expect(error).to_have_count(0, timeout=30_000)
    expect(run).to_be_enabled(timeout=30_000)
    sidebar_number(page, "total arrival rate (requests/s)", "10000000")  # ~1e9 requests: beyond any memory here
    refused = page.get_by_text("Run refused")
    refused.first.wait_for(timeout=30_000)
    assert run.is_disabled()
    no_clipped_text(page, "huge rate")
    sidebar_number(page, "total arrival rate (requests/s)", "18.1")  # 12 + 4 + 2 + 0.1 req/s as written
    expect(refused).to_have_count(0, timeout=30_000)
    expect(run).to_be_enabled(timeout=30_000)


def size_to_slo(page, n: int) -> None:
    open_view(page, "Size to SLO")
    budget = page.get_by_role("spinbutton", name="time budget (s)")
    budget.fill(str(BUDGET_S))
    budget.press("Enter")
    page.get_by_text(f"Budget: {BUDGET_S} s").wait_for(timeout=30_000)  # stated before it starts
    page.get_by_role("button", name="Size to SLO", exact=True).click()
    verdict = page.locator("[data-testid=stAlert]").filter(has_text=f"of the {BUDGET_S} s budget")
    verdict.wait_for(timeout=(BUDGET_S + 90) * 1000)  # the budget, one simulation past it, and the page
    page.get_by_text("Size to SLO: chat").wait_for(timeout=30_000)
    page.get_by_text("every layout tried").wait_for(timeout=30_000)  # drawn after every workload's table
    page.get_by_role("button", name="apply winners").wait_for(timeout=30_000)  # and the apply action last
    # one chips' table per workload (chat, dlm, image, search), then a winner among the chips
    expect(page.locator("[data-testid=stMain] [data-testid=stTable]")).to_have_count(4, timeout=30_000)
    page.locator("td", has_text="winner: cheapest layout meeting the SLO").first.wait_for(timeout=30_000)
    no_clipped_text(page, f"size to slo, {n} fleets")
    if os.environ.get("DCSIM_SCREENSHOTS"):
        whole_page_screenshot(page, Path(os.environ["DCSIM_SCREENSHOTS"]) / f"dashboard-size-to-slo-{n}fleets.png")
    page.get_by_role("button", name="apply winners").click()
    # the new fleet in the sidebar's editor (inside an expander: attached, open or not)
    page.locator("[data-testid=stSidebar]").get_by_text("sized-to-slo", exact=True).first.wait_for(
        state="attached", timeout=30_000)
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled(timeout=30_000)


def curves(page, n: int) -> None:
    open_view(page, "Curves")
    page.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=30_000)
    page.get_by_role("button", name="curves.csv").wait_for(timeout=30_000)
    assert page.locator("td", has_text="TP").count() > 0  # the table of best layouts per speed
    no_clipped_text(page, f"curves, {n} fleets")
    if os.environ.get("DCSIM_SCREENSHOTS"):
        whole_page_screenshot(page, Path(os.environ["DCSIM_SCREENSHOTS"]) / f"dashboard-curves-{n}fleets.png")


@pytest.mark.parametrize("n", [3, 5, 8])
def test_table_bad_value_huge_rate_size_to_slo_and_curves(server, page, tmp_path, n):
    page.goto(server)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=30_000)
    upload(page, many_fleets(tmp_path / f"fleets{n}.yaml", n, duration_s=60, warmup_s=10, drain_s=60))
    one_pool_fleet_in_the_table(page)
    bad_value_and_huge_rate(page)
    size_to_slo(page, n)
    curves(page, n)
