"""The dashboard's capacity-curves view (sim/dashboard_curves.py): the tables are those of
``dcsim curves``, a chip that cannot hold the model is left out with its reason, the SLO
region starts at 1/TPOT and the bands span ± the chip's band."""

from __future__ import annotations

import math

import pytest

from fleets.catalog_io import load_catalog
from sim import dashboard_curves as dc


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_defaults_follow_the_scenario_on_screen(catalog):
    from sim.overrides import document
    from sim.scenario import load_scenario

    start = dc.defaults_from(document(load_scenario("scenarios/default.yaml")), catalog)
    assert start.model == "llama-3.1-70b" and start.tpot_slo_s == 0.1  # the chat workload's
    assert start.chips == ("h100-sxm", "b200", "mi300x")
    assert "sdxl" not in dc.token_models(catalog) and "llama-3.1-405b" in dc.token_models(catalog)


def test_a_chip_that_cannot_hold_the_model_is_left_out_with_its_reason(catalog):
    inputs = dc.CurveInputs("llama-3.1-405b", ("tpu-v5e", "b200"), 1000, 1000, 0.05)
    table, front, summary, skipped = dc.tables(inputs, catalog)
    assert set(table["accelerator"]) == {"b200"} and list(skipped) == ["tpu-v5e"]
    assert skipped["tpu-v5e"]


def test_figure_marks_the_slo_region_and_shades_each_band(catalog):
    inputs = dc.CurveInputs("llama-3.1-70b", ("h200", "b200"), 1000, 1000, 0.05, 0.7)
    table, front, summary, _ = dc.tables(inputs, catalog)
    fig = dc.curves_figure(front, inputs)
    region = fig.layout.shapes[0]
    assert region.x0 == pytest.approx(1 / 0.05)  # 20 tokens/s per user (a shape takes data values on a log axis)
    label = next(a for a in fig.layout.annotations if a.text.startswith("meets TPOT"))
    assert label.x == pytest.approx(math.log10(20))  # an annotation takes log10 of them
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(bands) == 2
    h200 = front[front["accelerator"] == "h200"]
    band = catalog.accelerators["h200"].efficiency_band_pct / 100
    top = list(bands[0].y)[: len(h200)]
    assert top == pytest.approx(list(h200["tokens_per_s_per_gpu"] * (1 + band)))
    lines = [t for t in fig.data if t.mode == "lines+markers" and t.yaxis == "y"]
    assert [t.name.split(" ")[0] for t in lines] == ["h200", "b200"]
    shown = dc.speeds_table(summary, 0.7, 0.05)
    assert "tok/s per MW at 70%" in shown.columns
    assert set(shown["meets TPOT SLO"]) <= {"yes", "no", "—"}
    assert set(dc.speeds_table(summary, 0.7, None)["meets TPOT SLO"]) == {"—"}
