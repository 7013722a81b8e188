"""The measured-vs-predicted check of the GenAI trace (an optional dataset; CI: required)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from data_files import GENAI_TRACE, optional_file
from sim.scenario import load_scenario
from sim.studies.genai_report import measured_vs_predicted


def test_measured_medians_come_from_the_raw_csv(monkeypatch):
    path = optional_file(GENAI_TRACE)
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


def test_probes_that_outlast_the_gap_are_rerun_apart(monkeypatch):
    """With a first gap far shorter than one image (1 ms), the probes overlap; the check
    widens the gap and reruns instead of failing, and each key's service time equals the
    same key simulated alone in a run of its own (a second, overlap-free computation)."""
    import sim.studies.genai_report as genai_report
    from scenario_cases import make_scenario

    sc = make_scenario({"image": {"kind": "image_diffusion", "model": "sdxl",
                                  "arrival": {"kind": "poisson", "rate_per_s": 0.1}}},
                       [{"name": "image", "accelerator": "h100-sxm", "serves": ["image"], "replicas": 1, "max_batch": 8}])
    keys = pd.DataFrame({"steps": [30, 50, 20], "images": [1, 4, 2], "cfg": [1, 1, 0]})
    alone = pd.concat([genai_report.isolated_service(sc, "image", "f", keys.iloc[[i]]) for i in range(len(keys))],
                      ignore_index=True)
    monkeypatch.setattr(genai_report, "ISOLATION_GAP_S", 1e-3)
    together = genai_report.isolated_service(sc, "image", "f", keys)
    assert together["service_s"].to_numpy() == pytest.approx(alone["service_s"].to_numpy(), rel=1e-12)
    assert (together["service_s"] > 1e-3).all()  # so the first 1 ms gap did overlap
