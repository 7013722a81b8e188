"""The dashboard in a real browser: ``streamlit run app.py`` headless on a free port,
driven by Debian's Chromium through Playwright at 1600 px.

With 3 fleets (the default scenario) and 5 fleets (an uploaded scenario: the default's
three plus two identical copies), every view is opened and checked for clipped text:
no table cell, fleet card or KPI may have a scroll width above its client width.

With ``DCSIM_SCREENSHOTS=DIR`` each view is saved whole (not only the first 1000 px) as
``DIR/dashboard-<view>-<n>fleets.png`` (``make screenshots`` writes them to docs/), and the 3-fleet Overview and Roofline as
``dashboard-main.png`` and ``dashboard-roofline.png`` for docs/dashboard.md."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect
from browser_cases import CLIPPED_JS, launched_chromium
from dashboard_browser_cases import (CHECKED, many_fleets, progress_seen, run_and_wait, runs_ended, show_view,
                                     sidebar_number, streamlit_server, wait_for_rerun, watch_progress,
                                     whole_page_screenshot)

VIEWS = ["Overview", "Latency", "Utilisation", "Cost", "Roofline", "SLO misses", "Compare", "Energy"]
README_SHOTS = {"Overview": "dashboard-main.png", "Roofline": "dashboard-roofline.png"}

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


def check_views(page, fleets: int) -> None:
    docs = os.environ.get("DCSIM_SCREENSHOTS")
    for view in VIEWS:
        show_view(page, view)
        assert page.locator("[data-testid=stException]").count() == 0, view
        clipped = page.evaluate(CLIPPED_JS, CHECKED)
        assert not clipped, (view, fleets, clipped[:10])
        if docs:
            slug = view.lower().replace(" ", "-")
            whole_page_screenshot(page, Path(docs) / f"dashboard-{slug}-{fleets}fleets.png")
            if fleets == 3 and view in README_SHOTS:  # the two docs/dashboard.md shows
                page.screenshot(path=str(Path(docs) / README_SHOTS[view]))


def test_three_fleets_every_view_without_clipped_text(server, page):
    page.goto(server)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=30_000)
    # change a control: open the run settings, set the seed
    page.locator("[data-testid=stSidebar]").get_by_text("run", exact=True).click()
    seed = page.get_by_label("seed")
    before = runs_ended(page)
    seed.fill("43")
    seed.press("Enter")
    wait_for_rerun(page, before)  # the rerun after the edit
    elapsed_s = run_and_wait(page)
    print(f"\nRun -> results on the default scenario: {elapsed_s:.1f} s")
    assert page.locator("[data-testid=fleet-card]").count() == 3
    page.get_by_text("seed 43,").first.wait_for(timeout=5_000)  # the edited scenario ran
    check_views(page, 3)
    page.get_by_text("Fleets and pools as a table", exact=False).click()  # the table editor opens
    page.locator("[data-testid=stDataFrame]").first.wait_for(timeout=10_000)
    assert page.locator("[data-testid=stException]").count() == 0
    if os.environ.get("DCSIM_SCREENSHOTS"):
        page.screenshot(path=str(Path(os.environ["DCSIM_SCREENSHOTS"]) / "dashboard-fleet-table-3fleets.png"))


@pytest.mark.parametrize("n", [5, 8])
def test_many_fleets_uploaded_every_view_without_clipped_text(server, page, tmp_path, n):
    page.goto(server)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=30_000)
    page.locator("[data-testid=stSidebar] [data-testid=stSelectbox]").first.click()
    page.get_by_role("option", name="upload a scenario…").click()
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(str(many_fleets(tmp_path / "many.yaml", n)))
    page.get_by_text("many.yaml").wait_for(timeout=30_000)
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled(timeout=30_000)  # upload parsed
    run_and_wait(page)
    page.locator("[data-testid=fleet-card]").nth(n - 1).wait_for(timeout=60_000)
    assert page.locator("[data-testid=fleet-card]").count() == n
    check_views(page, n)


def test_bad_value_and_huge_rate_block_run_with_their_reason(server, page):
    """Replicas 0 and 100,000 req/s: each blocks Run, with its reason in the page; the
    value typed is kept (never silently replaced by the old one)."""
    page.goto(server)
    run = page.get_by_role("button", name="Run", exact=True)
    run.wait_for(timeout=30_000)
    sidebar = page.locator("[data-testid=stSidebar]")
    sidebar.get_by_text("hardware mix", exact=True).click()
    sidebar_number(page, "replicas", "0")
    page.get_by_text("replicas must be a whole number ≥ 1 (got 0)").first.wait_for(timeout=30_000)
    assert run.is_disabled()
    expect(sidebar.get_by_role("spinbutton", name="replicas").first).to_have_value("0", timeout=30_000)
    page.get_by_role("button", name="reset edits").click()
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled(timeout=30_000)
    sidebar_number(page, "total arrival rate (requests/s)", "100000")
    page.get_by_text("Run refused").first.wait_for(timeout=30_000)
    assert page.get_by_text("about 90,000,000 requests").count() >= 1
    assert run.is_disabled()
    assert page.locator("[data-testid=stException]").count() == 0


def test_a_new_one_pool_fleet_from_the_table_is_explained_and_keeps_the_edit(server, page):
    """Renaming the first row's fleet makes a new fleet of one pool (serving chat only):
    *apply table* says why it cannot run, beside the table, with no traceback; Run and
    reset stay, and the table still holds the edit."""
    page.goto(server)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=30_000)
    page.get_by_text("Fleets and pools as a table", exact=False).click()
    grid = page.locator("[data-testid=stDataFrame]").first
    grid.wait_for(timeout=30_000)
    cell = grid.locator("td[role=gridcell]", has_text="all-h100").first
    cell.wait_for(state="attached", timeout=30_000)
    # the first row's fleet cell (header 35 px, row 35 px); the locator's click waits until the grid
    # is visible and stable (the expander's opening animation over), unlike raw mouse coordinates
    grid.dblclick(position={"x": 40, "y": 35 + 17})
    editor = page.locator("textarea.gdg-input, input.gdg-input").first  # the grid's cell editor, once open
    editor.wait_for(timeout=30_000)
    editor.fill("brand-new")
    editor.press("Enter")
    grid.locator("td[role=gridcell]", has_text="brand-new").first.wait_for(state="attached", timeout=30_000)
    page.get_by_text("The table has edits not applied yet").wait_for(timeout=30_000)  # the server has the edit
    page.get_by_role("button", name="apply table").click()
    message = page.locator("[data-testid=stAlert]").filter(has_text="The table was not applied")
    message.wait_for(timeout=30_000)
    assert "fleet 'brand-new' has no pool serving" in message.inner_text()
    assert page.locator("[data-testid=stException]").count() == 0
    assert page.get_by_role("button", name="Run", exact=True).count() == 1 and page.get_by_role("button", name="reset edits").count() == 1
    assert grid.locator("td[role=gridcell]", has_text="brand-new").count() >= 1  # the user's edit survived
    if os.environ.get("DCSIM_SCREENSHOTS"):
        page.screenshot(path=str(Path(os.environ["DCSIM_SCREENSHOTS"]) / "dashboard-table-error.png"))


def test_long_placement_error_is_full_width_and_run_says_why(server, page):
    """TPU v5e (16 GB) cannot hold Llama-3.1-70B at tp=4: a ~450-character placement
    error, shown full-width in the main panel, not broken word by word in the sidebar."""
    page.goto(server)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=30_000)
    sidebar = page.locator("[data-testid=stSidebar]")
    sidebar.get_by_text("hardware mix", exact=True).click()
    select = sidebar.locator("[data-testid=stSelectbox]").filter(has_text="accelerator").first
    select.click()
    page.keyboard.type("tpu-v5e")  # the option list is virtualised: type to filter
    # click the option once the filter shows it: Enter could pick the option highlighted
    # before the list was filtered (a race under load), leaving the accelerator unchanged
    page.get_by_role("option").filter(has_text="tpu-v5e").first.click(timeout=30_000)
    expect(select.get_by_role("combobox")).to_have_value("tpu-v5e", timeout=30_000)
    page.get_by_text("Run is disabled").wait_for(timeout=60_000)
    assert page.get_by_role("button", name="Run", exact=True).is_disabled()
    error = page.locator("[data-testid=stMain] [data-testid=stAlert]").filter(has_text="cannot place model")
    error.wait_for(timeout=5_000)
    box = error.bounding_box()
    assert box["width"] > 800 and box["height"] < 200, box  # full width, a few lines tall
    assert not page.evaluate(CLIPPED_JS, "[data-testid=stAlert] p")


def test_a_long_run_shows_progress(server, page):
    """3,000 s of arrivals on the default scenario (about ten times the dashboard's
    default, so that the compiled engine still takes seconds per fleet): while it runs, the progress bar fed by the engine's progress callback
    shows which fleet is simulated and how many requests are done, then the results."""
    page.goto(server)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=30_000)
    page.locator("[data-testid=stSidebar]").get_by_text("run", exact=True).click()
    duration = page.get_by_role("spinbutton", name="arrivals for (s)")
    before = runs_ended(page)
    duration.fill("3000")
    duration.press("Enter")
    wait_for_rerun(page, before)  # the edit's rerun
    watch_progress(page)
    page.get_by_role("button", name="Run", exact=True).click()
    page.locator("[data-testid=fleet-card]").first.wait_for(timeout=180_000)
    seen = progress_seen(page)
    assert any(t.startswith("simulating fleet all-h100 (1/3, ") for t in seen), seen
    assert any(t.startswith("simulating fleet all-b200 (2/3, ") for t in seen), seen
    assert any("requests" in t and "/" in t for t in seen), seen
    page.get_by_text("3000 s of arrivals").first.wait_for(timeout=10_000)
    assert page.locator("[data-testid=stProgress]").count() == 0  # gone once the results are drawn
