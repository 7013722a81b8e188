"""The genai_csv reader on slices the tests write, and the full trace replay (CI: required)."""

from __future__ import annotations

import re

import itertools
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_files import GENAI_TRACE, optional_file
from sim.inputs import parse_number
from sim.errors import ScenarioError, TraceError
from sim.scenario import load_scenario, parse_scenario
from traffic.genai_trace import GenaiTraceArrivals, load_genai_trace

HEADER = ("gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,"
          "negative_prompt_length,num_images_per_prompt,num_inference_steps,checkpoint_model_version_id,num_lora")
ROWS = [
    "2024-11-18 23:59:58,TXT_2_IMG,SUCCEED,20.0,G1,60.0,26.0,1.0,30.0,M1,0",
    "2024-11-19 00:00:00,IMG_2_IMG,SUCCEED,30.0,G1,60.0,,4.0,30.0,M1,0",
    "2024-11-19 00:00:00,INPAINTING,FAILED,8.0,G2,10.0,5.0,8.0,30.0,M2,1",
    "2024-11-19 00:00:10,TXT_2_IMG,PENDING,0.0,G3,,,,,,0",
    "2024-11-19 00:00:20,TXT_2_IMG,SUCCEED,25.0,G3,40.0,0.0,2.0,50.0,M1,0",
]


@pytest.fixture
def slice_path(tmp_path):
    path = tmp_path / "genai.csv"
    path.write_text("\n".join([HEADER, *ROWS]) + "\n", encoding="utf-8")
    return path


def arrival(path, **kw) -> GenaiTraceArrivals:
    return GenaiTraceArrivals.model_validate({"kind": "trace", "format": "genai_csv", "path": str(path), **kw})


def test_whole_seconds_without_jitter(slice_path):
    times, rows = arrival(slice_path, jitter=False).select(None, 100.0)
    assert times.tolist() == [0.0, 2.0, 2.0, 12.0, 22.0]
    assert rows.tolist() == [0, 1, 2, 3, 4]


def test_failed_rows_dropped_on_request(slice_path):
    times, rows = arrival(slice_path, jitter=False, failed="drop").select(None, 100.0)
    assert rows.tolist() == [0, 1, 4]
    assert times.tolist() == [0.0, 2.0, 22.0]


def test_jitter_stays_within_the_second_and_follows_the_seed(slice_path):
    a = arrival(slice_path)
    t1, rows1 = a.select(np.random.default_rng(1), 100.0)
    t2, _ = a.select(np.random.default_rng(1), 100.0)
    t3, _ = a.select(np.random.default_rng(2), 100.0)
    whole = np.array([0.0, 2.0, 2.0, 12.0, 22.0])[rows1]
    assert np.all((t1 >= whole) & (t1 < whole + 1.0))
    assert np.all(np.diff(t1) >= 0)
    assert np.array_equal(t1, t2) and not np.array_equal(t1, t3)


def test_window_start_rate_scale_and_loop(slice_path):
    a = arrival(slice_path, jitter=False, **{"from": "2024-11-19", "to": "2024-11-19 00:00:15"})
    times, rows = a.select(None, 100.0)
    assert rows.tolist() == [1, 2, 3] and times.tolist() == [0.0, 0.0, 10.0]
    fast = arrival(slice_path, jitter=False, rate_scale=2.0, start_s=2.0)
    assert fast.select(None, 100.0)[0].tolist() == [0.0, 0.0, 5.0, 10.0]
    # period = span 20 + mean gap 20/3 trace-seconds after start_s
    looped = arrival(slice_path, jitter=False, start_s=2.0, loop=True).select(None, 60.0)[0]
    period = 20.0 + 20.0 / 3
    assert np.allclose(looped, [0, 0, 10, 20, period, period, period + 10, period + 20, 2 * period, 2 * period])


def test_request_shapes_follow_task_images_and_negative_prompt(slice_path):
    shapes = arrival(slice_path, jitter=False).request_shapes(np.arange(5))
    # txt2img 30; img2img int(30 x 0.3) = 9; inpainting int(30 x 0.9999) = 29; pending: defaults
    assert shapes["steps"].tolist() == [30, 9, 29, 0, 50]
    assert shapes["images"].tolist() == [1, 4, 8, 1, 2]
    assert shapes["cfg"].tolist() == [1, 0, 1, -1, 0]
    own = arrival(slice_path, img2img_strength=0.5, cfg_from_negative_prompt=False).request_shapes(np.arange(5))
    assert own["steps"].tolist()[:2] == [30, 15]
    assert own["cfg"].tolist() == [-1] * 5


@pytest.mark.parametrize(
    ("bad_row", "field"),
    [
        ("2024-11-19 00:00:99,TXT_2_IMG,SUCCEED,1,G,1,,1,30,M,0", "gmt_create"),
        ("2024-11-19 00:00:01,TXT2IMG,SUCCEED,1,G,1,,1,30,M,0", "predict_type"),
        ("2024-11-19 00:00:01,TXT_2_IMG,DONE,1,G,1,,1,30,M,0", "predict_status"),
        ("2024-11-19 00:00:01,TXT_2_IMG,SUCCEED,1,G,1,,0,30,M,0", "num_images_per_prompt"),
        ("2024-11-19 00:00:01,TXT_2_IMG,SUCCEED,1,G,1,,1,2.5,M,0", "num_inference_steps"),
        ("2024-11-19 00:00:01,TXT_2_IMG,SUCCEED,-1,G,1,,1,30,M,0", "exec_time_seconds"),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path, bad_row, field):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([HEADER, ROWS[0], bad_row]) + "\n", encoding="utf-8")
    column = HEADER.split(",").index(field) + 1
    with pytest.raises(TraceError, match=rf"bad.csv:3:{column}: {field}: ") as info:
        load_genai_trace(path)
    cell = bad_row.split(",")[column - 1]
    shown = cell.rstrip("0").rstrip(".") if "." in cell else cell  # a number is shown once parsed, text never
    assert (shown in str(info.value)) == (parse_number(cell) is not None), info.value


@pytest.mark.parametrize(("text", "expected"), [
    ("\n".join([HEADER, ROWS[0], "", ROWS[1], "2024-11-19 00:00:01,TXT_2_IMG,SUCCEED,1,G"]), "bad.csv:5: 5 field(s)"),
    ("\n".join([HEADER, ROWS[0], "", "", ROWS[0].replace("TXT_2_IMG", "TXT2IMG")]), "bad.csv:5:2: predict_type"),
    ("\n".join([HEADER, ROWS[0].replace(",G1,", ',"G\nH",'), ROWS[0].replace("TXT_2_IMG", "x")]), "bad.csv:4:2:"),
], ids=["ragged_row_after_a_blank_line", "line_after_blank_lines", "line_after_a_quoted_line_break"])
def test_line_numbers_count_blank_lines_and_quoted_line_breaks(tmp_path, text, expected):
    """Regression (issue 23): line numbers were off after blank lines and quoted multi-line
    fields, and a row with 5 of 11 fields was accepted with defaults."""
    path = tmp_path / "bad.csv"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=re.escape(expected)):
        load_genai_trace(path)


def test_genai_csv_is_for_image_diffusion_only(slice_path):
    data = {
        "duration_s": 10,
        "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                               "arrival": {"kind": "trace", "format": "genai_csv", "path": str(slice_path)}}},
        "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}]}],
    }
    with pytest.raises(ScenarioError, match="must be image_diffusion"):
        parse_scenario(data, "s.yaml")


def test_replayed_requests_carry_their_images(slice_path):
    """Each sample's denoiser work is counted: the engine's sample-steps per request are
    images x steps actually run, and its FLOP scale with images at equal steps and CFG."""
    from sim.engine.core import simulate

    data = {
        "seed": 1, "duration_s": 300, "drain_s": 600,
        "workloads": {"image": {"kind": "image_diffusion", "model": "sdxl", "cfg": True,
                                "arrival": {"kind": "trace", "format": "genai_csv", "path": str(slice_path),
                                            "jitter": False, "rate_scale": 0.1}}},
        "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["image"],
                                             "replicas": 1, "max_batch": 16}]}],
    }
    run = simulate(parse_scenario(data, "s.yaml"))
    req = run.requests.sort_values("request_id")
    assert req["status"].eq("completed").all()
    # pending row: workload defaults (sdxl's catalog steps, 1 image)
    default_steps = req["sample_steps"].iloc[3]
    assert req["sample_steps"].tolist() == [30, 4 * 9, 8 * 29, default_steps, 2 * 50]
    assert req["images"].tolist() == [1, 4, 8, 1, 2]
    per_sample_step = req["denoiser_flops"] / req["sample_steps"]
    # rows 0, 2 run CFG (negative prompt), rows 1, 4 do not: twice the FLOP per sample-step
    assert per_sample_step.iloc[0] == pytest.approx(2 * per_sample_step.iloc[1])
    assert per_sample_step.iloc[2] == pytest.approx(per_sample_step.iloc[0])
    assert per_sample_step.iloc[4] == pytest.approx(per_sample_step.iloc[1])


@pytest.mark.slow  # the whole shared trace on three fleets
def test_full_trace_replay_on_three_fleets(monkeypatch):
    """scenarios/genai-image.yaml replays every row of the trace (optional dataset) on each fleet."""
    path = optional_file(GENAI_TRACE)
    from pathlib import Path

    from sim.results.tables import run_scenario

    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # trace paths are relative to the repo root

    raw = pd.read_csv(path)
    results = run_scenario(load_scenario("scenarios/genai-image.yaml"))
    summary = results.summary.set_index("fleet")
    assert sorted(summary.index) == ["b200", "h100", "mi300x"]
    assert (summary["requests"] == len(raw)).all()
    images = raw["num_images_per_prompt"].fillna(1).sum()
    window_s = 1_990_000
    assert summary["images_per_s"].to_numpy() == pytest.approx(images / window_s)
    assert not summary["unstable"].any()
    assert (summary["queue_p99_s"] <= summary["e2e_p99_s"]).all()


def _image_scenario(path, max_batch=16, **arrival):
    return {
        "seed": 1, "duration_s": 300, "drain_s": 600,
        "workloads": {"image": {"kind": "image_diffusion", "model": "sdxl",
                                "arrival": {"kind": "trace", "format": "genai_csv", "path": str(path), **arrival}}},
        "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["image"],
                                             "replicas": 1, "max_batch": max_batch}]}],
    }


def test_images_above_max_batch_are_refused_before_the_run(slice_path):
    from sim.engine.core import simulate
    from sim.errors import PlacementError

    with pytest.raises(PlacementError, match=r"max_batch \(=4\) is smaller than the 8 images"):
        simulate(parse_scenario(_image_scenario(slice_path, max_batch=4), "s.yaml"))


def test_resolved_scenario_round_trips_the_window(slice_path):
    from sim.scenario import scenario_to_yaml
    import yaml

    sc = parse_scenario(_image_scenario(slice_path, **{"from": "2024-11-19", "failed": "drop"}), "s.yaml")
    dumped = yaml.safe_load(scenario_to_yaml(sc))
    assert dumped["workloads"]["image"]["arrival"]["from"].startswith("2024-11-19")
    assert parse_scenario(dumped, "again.yaml") == sc


_FILES = itertools.count()
_ROW = st.tuples(
    st.integers(0, 200),  # second after 2024-11-19 00:00:00
    st.sampled_from(["TXT_2_IMG", "IMG_2_IMG", "INPAINTING"]),
    st.sampled_from(["SUCCEED", "SUCCEED", "FAILED", "PENDING"]),
    st.integers(1, 8),
    st.integers(1, 100),
    st.integers(0, 40),
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_ROW, min_size=2, max_size=30), seed=st.integers(0, 2**32 - 1), drop=st.booleans())
def test_generated_slices_replay_every_kept_row_once(tmp_path, rows, seed, drop):
    """Any slice: every kept row arrives once, within its own second, in time order, and
    its shape follows the documented rules (checked row by row, not via the reader)."""
    lines = [f"2024-11-19 00:{s // 60:02d}:{s % 60:02d},{task},{status},1.0,G,10,{neg or ''},{n},{k},M,0"
             for s, task, status, n, k, neg in rows]
    path = tmp_path / f"gen{next(_FILES)}.csv"  # a fresh name: the reader caches by path and mtime
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    a = arrival(path, failed="drop" if drop else "keep", **{"from": "2024-11-19"})
    kept = [i for i, r in enumerate(sorted(rows, key=lambda r: r[0])) if not drop or r[2] == "SUCCEED"]
    if not kept:
        with pytest.raises(TraceError, match="no rows left"):
            a.select(np.random.default_rng(seed), 1e6)
        return
    times, picked = a.select(np.random.default_rng(seed), 1e6)
    assert sorted(picked.tolist()) == kept
    ordered = sorted(rows, key=lambda r: r[0])
    whole = np.array([ordered[i][0] for i in picked], dtype=float)
    assert np.all((times >= whole) & (times < whole + 1.0)) and np.all(np.diff(times) >= 0)
    shapes = a.request_shapes(picked)
    for i, steps, images, cfg in zip(picked, shapes["steps"], shapes["images"], shapes["cfg"]):
        _, task, _, n, k, neg = ordered[i]
        strength = {"TXT_2_IMG": 1.0, "IMG_2_IMG": 0.3, "INPAINTING": 0.9999}[task]
        # diffusers img2img/inpaint get_timesteps: init_timestep = min(int(steps * strength), steps);
        # it refuses a run left with 0 steps, so a served request ran at least one
        assert steps == max(1, min(int(k * strength), k))
        assert images == n and cfg == (1 if neg else 0)


def test_regression_every_row_dropped_is_a_trace_error(tmp_path):
    """Shrunk hypothesis example: failed: drop on a slice with no SUCCEED row."""
    path = tmp_path / "failed.csv"
    path.write_text("\n".join([HEADER, "2024-11-19 00:00:00,TXT_2_IMG,FAILED,1.0,G,10,,1,1,M,0",
                               "2024-11-19 00:00:00,TXT_2_IMG,FAILED,1.0,G,10,,1,1,M,0"]) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"no rows left after failed='drop'"):
        arrival(path, failed="drop").select(np.random.default_rng(0), 10.0)


def test_workload_steps_override_the_trace(slice_path):
    """An explicit workload ``steps`` runs that many for every row (images still per row)."""
    from sim.engine.core import simulate

    data = _image_scenario(slice_path, jitter=False, rate_scale=0.1)
    data["workloads"]["image"]["steps"] = 4
    req = simulate(parse_scenario(data, "s.yaml")).requests.sort_values("request_id")
    assert req["sample_steps"].tolist() == [4 * n for n in (1, 4, 8, 1, 2)]


def test_symlink_loop_is_a_trace_error(tmp_path):
    """genai_csv paths go through the same resolver as the other trace formats: a
    symlink loop is a TraceError naming the path, not an OSError/RuntimeError."""
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    with pytest.raises(TraceError, match="loop.csv"):
        load_genai_trace(loop)
