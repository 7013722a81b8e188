"""The HTML report of ``dcsim report`` in a real browser (Debian's Chromium through
Playwright, 1600 px wide): with 3 and 5 fleets no fleet card, KPI, table cell or table
box is clipped or scrolls sideways (scroll width ≤ client width), and every chart draws.

The runs are the default scenario's fleets (and two copies for 5) on 60 s of arrivals."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
import yaml
from browser_cases import CLIPPED_JS, launched_chromium

from sim.results.export import write_results
from sim.results.report_html import write_report
from sim.results.tables import run_scenario
from sim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[3]
CHECKED = ".fleet, .kpi, .kpi *, .wide, td, th"
# a card that spills past its neighbour or the page: every card inside the page's width
OUTSIDE_JS = """() => {
  const page = document.body.getBoundingClientRect();
  return [...document.querySelectorAll('.fleet')].filter(c => {
    const r = c.getBoundingClientRect();
    return r.left < page.left - 1 || r.right > page.right + 1;
  }).length;
}"""

pytestmark = pytest.mark.slow


def scenario(fleets: int):
    data = yaml.safe_load((ROOT / "scenarios" / "default.yaml").read_text())
    data["fleets"] = data["fleets"] + [dict(f, name=f"{f['name']}-copy") for f in data["fleets"][:fleets - 3]]
    data.update(name=f"default-{fleets}-fleets", duration_s=60.0, warmup_s=10.0)
    return parse_scenario(data, f"default-{fleets}")


@pytest.fixture(scope="module")
def browser():
    yield from launched_chromium()


@pytest.mark.parametrize("fleets", [3, 5])
def test_report_cards_and_tables_are_not_clipped(browser, tmp_path, fleets):
    run_dir = write_results(run_scenario(scenario(fleets)), tmp_path / f"run{fleets}")
    report = write_report(run_dir, tmp_path / f"report{fleets}.html")
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    try:
        page = context.new_page()
        page.goto(report.as_uri())
        page.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=30_000)
        assert page.locator(".fleet").count() == fleets
        assert page.locator(".fleet table").count() == fleets
        band = float(next(r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "accelerators.csv"))
                          if r["key"] == "b200")["efficiency_band_pct"])
        card = page.locator(".fleet").filter(has_text="all-b200").first.inner_text()
        assert card.count(f"±{band:g}%") >= 4  # the band beside the transferred fleet's figures
        clipped = page.evaluate(CLIPPED_JS, CHECKED)
        assert not clipped, clipped[:10]
        assert page.evaluate(OUTSIDE_JS) == 0
        if os.environ.get("DCSIM_SCREENSHOTS"):
            page.screenshot(path=str(Path(os.environ["DCSIM_SCREENSHOTS"]) / f"report-{fleets}fleets.png"), full_page=True)
    finally:
        context.close()
