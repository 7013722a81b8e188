"""``dcsim report DIR``: one self-contained HTML file from a run or a sweep directory."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from sim.engine.core import TIMESERIES_COLUMNS
from sim.results import report_html
from sim.errors import UserError
from sim.results.export import write_results
from sim.results.tables import run_scenario
from sim.scenario import parse_scenario

SMALL = {
    "name": "small", "seed": 5, "duration_s": 20.0, "warmup_s": 2.0, "drain_s": 60.0,
    "workloads": {
        "chat": {"kind": "autoregressive", "model": "llama-3-70b", "arrival": {"kind": "poisson", "rate_per_s": 2}},
        "image": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 1}},
    },
    "fleets": [
        {"name": "h100", "pools": [
            {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 4},
            {"name": "image", "accelerator": "h100-sxm", "serves": ["image"], "replicas": 1}]},
        {"name": "mi300x", "pools": [
            {"name": "chat", "accelerator": "mi300x", "serves": ["chat"], "replicas": 1, "tp": 2},
            {"name": "image", "accelerator": "mi300x", "serves": ["image"], "replicas": 1}]},
    ],
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return write_results(run_scenario(parse_scenario(SMALL, "small")), tmp_path_factory.mktemp("r") / "small")


@pytest.fixture
def sweep_dir(tmp_path):
    rows = [{"workloads.chat.arrival.rate_per_s": r, "economics.pue": p, "fleet": f, "workload": "chat", "seeds": 2,
             "e2e_p99_s_mean": r * (1 + i), "cost_per_request_usd_mean": 0.001 * p / (1 + i)}
            for r in (1, 2, 4) for p in (1.2, 1.5) for i, f in enumerate(("a", "b"))]
    (tmp_path / "sweep").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "sweep" / "sweep.csv", index=False)
    return tmp_path / "sweep"


def plots(page: str) -> int:
    return len(re.findall(r'class="plotly-graph-div"', page))


def test_run_report_is_self_contained(run_dir, tmp_path):
    out = report_html.write_report(run_dir, tmp_path / "r.html")
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert get_plotlyjs() in page  # plotly.js embedded, once
    ours = page.replace(get_plotlyjs(), "")
    assert "src=" not in ours and "cdn.plot.ly" not in ours  # nothing fetched from the network
    assert "Plotly.newPlot" in ours
    assert plots(page) >= 6
    assert "Roofline" in page and "h100" in page and "mi300x" in page
    assert "capex" in page and "$" in page


def test_default_path_is_beside_the_directory(run_dir):
    assert report_html.default_report_path(run_dir) == run_dir.with_name("small.html")


def test_load_run_rebuilds_results(run_dir):
    results = report_html.load_run(run_dir)
    assert set(results.fleets["fleet"]) == {"h100", "mi300x"}
    assert list(results.timeseries.columns) == list(TIMESERIES_COLUMNS)
    assert set(results.timeseries["fleet"]) == {"h100", "mi300x"} and (results.timeseries["queued"] >= 0).all()


def test_sweep_report_has_pareto_and_heatmaps(sweep_dir, tmp_path):
    page = report_html.write_report(sweep_dir, tmp_path / "s.html").read_text()
    assert "Pareto: chat" in page
    assert page.count("Heatmap:") == 2
    assert plots(page) == 3


def test_not_a_result_directory(tmp_path):
    with pytest.raises(UserError, match="not a dcsim result directory"):
        report_html.write_report(tmp_path)


def test_dcsim_report_command(run_dir, sweep_dir, tmp_path):
    from sim.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["report", str(sweep_dir), "--out", str(tmp_path / "x.html")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x.html").is_file()
    bad = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert bad.exit_code == 2
    assert "dcsim: error:" in bad.output


def test_run_report_compares_all_fleets_in_one_table(run_dir, tmp_path):
    """The report's comparison is the dashboard's N-fleet table (a column per fleet, the
    best highlighted), not pairwise 'B vs A' charts; the best $/request read from summary.csv."""
    page = report_html.write_report(run_dir, tmp_path / "r.html").read_text()
    assert " vs " not in page.replace(get_plotlyjs(), "")
    table = re.search(r"<table class='compare'>(.*?)</table>", page).group(1)
    assert re.search(r"<tr><th>scope</th><th>metric</th><th>h100</th><th>mi300x</th><th>best</th>", table)
    summary = pd.read_csv(run_dir / "summary.csv").set_index(["workload", "fleet"])["cost_per_request_usd"]
    cheaper = "h100" if summary["chat", "h100"] < summary["chat", "mi300x"] else "mi300x"
    row = re.search(r"<tr><td>chat</td><td>\$/request</td>(.*?)</tr>", table).group(1)
    cells = re.findall(r"<td( style='[^']*')?>([^<]*)</td>", row)
    assert [bool(style) for style, _ in cells[:2]] == [cheaper == "h100", cheaper == "mi300x"]
    assert cells[2][1] == cheaper
