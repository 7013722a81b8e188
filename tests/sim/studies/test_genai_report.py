"""The measured-vs-predicted check of the GenAI trace (shared data; CI: required)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from shared_data import TRACES, require_file
from sim.scenario import load_scenario
from sim.studies.genai_report import measured_vs_predicted


def test_measured_medians_come_from_the_raw_csv(monkeypatch):
    path = require_file(TRACES / "alibaba_genai_lora_request_trace.csv")
    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    out, fit = measured_vs_predicted(load_scenario("scenarios/genai-image.yaml"), "h100")
    raw = pd.read_csv(path)
    ok = raw[raw["predict_status"] == "SUCCEED"]
    medians = ok.groupby(["predict_type", "num_images_per_prompt"])["exec_time_seconds"].agg(["median", "size"])
    got = out.set_index(["task", "images"])
    assert len(got) == len(medians)
    for (task, images), row in medians.iterrows():
        assert got.loc[(task, int(images)), "measured_median_s"] == row["median"]
        assert got.loc[(task, int(images)), "requests"] == row["size"]
    assert (got["accelerator"] == "h100-sxm").all()
    assert got["ratio"].to_numpy() == pytest.approx((got["measured_median_s"] / got["predicted_median_s"]).to_numpy())
    txt = got.loc["TXT_2_IMG"]
    # more images at the same steps take longer on an idle replica (samples share steps, not FLOP)
    assert txt.loc[1, "predicted_median_s"] < txt.loc[2, "predicted_median_s"] < txt.loc[4, "predicted_median_s"]
    assert fit["intercept_s"] > 0 and fit["per_image_s"] > 0
