"""Trace readers against trace_summary.csv (independent numbers) and malformed files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sim.errors import TraceError, UserError
from traffic.arrivals import ARRIVAL_ADAPTER, TraceArrivals
from traffic.traces import _load_cached, load_trace

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="latin-1" if "latin1" in name else "utf-8")
    return path


def _check_summary(trace, row) -> None:
    assert trace.rows == row.rows
    assert trace.span_s == pytest.approx(row.span_s, abs=0.05)
    assert trace.mean_rate_per_s == pytest.approx(row.mean_rate_rps, abs=5e-4)
    assert trace.prompt_tokens.mean() == pytest.approx(row.in_mean, abs=0.05)
    assert trace.output_tokens.mean() == pytest.approx(row.out_mean, abs=0.05)
    assert np.median(trace.prompt_tokens) == row.in_p50 and trace.prompt_tokens.max() == row.in_max
    gaps = np.diff(trace.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(row.interarrival_cv, abs=5e-3)
    assert trace.arrival_s[0] == 0.0 and np.all(gaps >= 0)
    assert trace.arrival_s.dtype == np.float64 and trace.prompt_tokens.dtype == np.int64


def test_azure_conv_matches_summary(azure_conv_path, trace_summary):
    _load_cached.cache_clear()
    trace = load_trace(azure_conv_path, "azure_csv")
    _check_summary(trace, trace_summary.loc["azure2023_conv"])


def test_azure_code_matches_summary(azure_code_path, trace_summary):
    _check_summary(load_trace(azure_code_path, "azure_csv"), trace_summary.loc["azure2023_code"])


def test_mooncake_matches_summary(mooncake_path, trace_summary):
    _check_summary(load_trace(mooncake_path, "mooncake_jsonl"), trace_summary.loc["mooncake_fast25_conversation"])


def test_trace_arrivals_rate_scale_halves_span(azure_conv_path, trace_summary):
    row = trace_summary.loc["azure2023_conv"]
    base = TraceArrivals(path=azure_conv_path, format="azure_csv")
    fast = ARRIVAL_ADAPTER.validate_python({"kind": "trace", "path": str(azure_conv_path), "format": "azure_csv", "rate_scale": 2.0})
    times, fast_times = base.arrival_times(None, 1e6), fast.arrival_times(None, 1e6)
    assert times.size == fast_times.size == row.rows
    assert times[-1] == pytest.approx(row.span_s, abs=0.05)
    assert fast_times[-1] == pytest.approx(row.span_s / 2, abs=0.05)
    assert base.mean_rate_per_s == pytest.approx(row.mean_rate_rps, abs=5e-4)
    assert fast.mean_rate_per_s == pytest.approx(2 * row.mean_rate_rps, abs=1e-3)


def test_trace_arrivals_window_offset_and_lengths(azure_conv_path):
    trace = load_trace(azure_conv_path, "azure_csv")
    process = TraceArrivals(path=azure_conv_path, format="azure_csv", start_s=600.0)
    times = process.arrival_times(np.random.default_rng(0), 300.0)
    prompt, output = process.lengths(300.0)
    chosen = (trace.arrival_s >= 600.0) & (trace.arrival_s < 900.0)
    np.testing.assert_allclose(times, trace.arrival_s[chosen] - 600.0)
    np.testing.assert_array_equal(prompt, trace.prompt_tokens[chosen])
    np.testing.assert_array_equal(output, trace.output_tokens[chosen])


def test_trace_arrivals_loop(azure_conv_path, trace_summary):
    row = trace_summary.loc["azure2023_conv"]
    process = TraceArrivals(path=azure_conv_path, format="azure_csv", loop=True)
    times = process.arrival_times(None, 3 * row.span_s)
    prompt, _ = process.lengths(3 * row.span_s)
    assert np.all(np.diff(times) >= 0) and times[-1] < 3 * row.span_s
    assert prompt.size == times.size
    assert times.size == pytest.approx(3 * row.rows, abs=5)  # three copies, minus the last few
    assert process.mean_rate_per_s == pytest.approx(row.mean_rate_rps, rel=1e-3)


def test_with_path_returns_copy(tmp_path, azure_conv_path):
    original = TraceArrivals(path="elsewhere.csv", format="azure_csv")
    moved = original.with_path(azure_conv_path)
    assert original.path == Path("elsewhere.csv") and moved.path == azure_conv_path
    assert moved.arrival_times(None, 10.0).size > 0
    with pytest.raises(TraceError, match="elsewhere.csv"):
        original.arrival_times(None, 10.0)


def test_relative_path_resolved_from_cwd(tmp_path, monkeypatch):
    _write(tmp_path, "t.csv", HEADER + "2023-11-16 18:00:00.0000000,10,2\n2023-11-16 18:00:01.5000000,20,3\n")
    monkeypatch.chdir(tmp_path)
    assert load_trace("t.csv", "azure_csv").arrival_s.tolist() == [0.0, 1.5]


def test_out_of_order_rows_sorted_stably(tmp_path):
    path = _write(tmp_path, "t.csv", HEADER + "2023-11-16 18:00:02.0,30,3\n2023-11-16 18:00:00.0,10,1\n"
                  "2023-11-16 18:00:02.0,40,4\n2023-11-16 18:00:01.0,20,2\n")
    trace = load_trace(path, "azure_csv")
    assert trace.arrival_s.tolist() == [0.0, 1.0, 2.0, 2.0]
    assert trace.prompt_tokens.tolist() == [10, 20, 30, 40] and trace.output_tokens.tolist() == [1, 2, 3, 4]


def test_mooncake_small_file_and_blank_lines(tmp_path):
    path = _write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n\n'
                  '{"timestamp": 2500, "input_length": 7, "output_length": 0}\n\n')
    trace = load_trace(path, "mooncake_jsonl")
    assert trace.arrival_s.tolist() == [0.0, 2.5] and trace.output_tokens.tolist() == [1, 0]
    prompt, output = TraceArrivals(path=path, format="mooncake_jsonl").lengths(10.0)
    assert output.tolist() == [1, 1]  # zero output raised to one token


def test_cache_sees_rewritten_file(tmp_path):
    path = _write(tmp_path, "t.csv", HEADER + "2023-11-16 18:00:00.0,10,2\n")
    assert load_trace(path, "azure_csv").rows == 1
    path.write_text(HEADER + "2023-11-16 18:00:00.0,10,2\n2023-11-16 18:00:01.0,10,2\n", encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert load_trace(path, "azure_csv").rows == 2


AZURE_BAD = [
    ("missing_column.csv", "TIMESTAMP,ContextTokens,Output\n2023-11-16 18:00:00.0,1,2\n", ["line 1", "GeneratedTokens"]),
    ("text_tokens.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n2023-11-16 18:00:01.0,1,2\n2023-11-16 18:00:02.0,abc,2\n",
     ["line 4:2", "ContextTokens", "not a number"]),
    ("negative.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n2023-11-16 18:00:01.0,1,-5\n", ["line 3", "GeneratedTokens", "-5"]),
    ("fraction.csv", HEADER + "2023-11-16 18:00:00.0,1.5,2\n", ["line 2", "ContextTokens", "1.5"]),
    ("bad_time.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n2023-11-16 25:61:00.0,1,2\n", ["line 3:1", "TIMESTAMP", "not a timestamp"]),
    ("blank_time.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n,1,2\n", ["line 3", "TIMESTAMP"]),
    ("blank_middle.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n\n2023-11-16 18:00:01.0,1,2\n", ["line 3", "blank line"]),
    ("ragged.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n2023-11-16 18:00:01.0,1\n", ["line 3", "2 field(s)", "header has 3"]),
    ("year_one.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n0001-01-01 00:00:00.0,1,2\n", ["line 3:1", "year 1 is outside"]),
    ("quoted_lines.csv", HEADER + '2023-11-16 18:00:00.0,1,"2\n"\n2023-11-16 18:00:01.0,x,2\n', ["line 4:2", "not a number"]),
    ("latin1.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n2023-11-16 18:00:01.0,1,2 \xe9\n", ["line 3", "not UTF-8"]),
    ("empty.csv", "", ["line 1", "TIMESTAMP"]),
    ("header_only.csv", HEADER, ["line 2", "no data rows"]),
]


@pytest.mark.parametrize(("name", "text", "needles"), AZURE_BAD, ids=[case[0] for case in AZURE_BAD])
def test_malformed_azure_raises_trace_error(tmp_path, name, text, needles):
    path = _write(tmp_path, name, text)
    with pytest.raises(TraceError) as info:
        load_trace(path, "azure_csv")
    check_message(str(info.value), name, needles, text)


def check_message(message: str, name: str, needles: list[str], text: str) -> None:
    """The message names ``file:LINE`` (a needle "line N[:F]" reads ``name:N[:F]``) and the
    other needles, and repeats no line of the file (numbers excepted: they were parsed)."""
    for needle in needles:
        assert (f"{name}:{needle[5:]}" if needle.startswith("line ") else needle) in message, (needle, message)
    for line in text.splitlines():
        assert len(line) < 12 or line not in message, (line, message)
    for word in ("abc", "many", "25:61", "Output"):
        assert word not in message


GOOD = '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
MOONCAKE_BAD = [
    ("bad_json.jsonl", GOOD + '{"timestamp": 10, "input_length": 5,\n', ["line 2", "JSON"]),
    ("not_object.jsonl", GOOD + GOOD + "[1, 2, 3]\n", ["line 3", "object"]),
    ("missing_field.jsonl", GOOD + '{"timestamp": 10, "output_length": 1}\n', ["line 2", "input_length", "missing"]),
    ("text_field.jsonl", GOOD + '{"timestamp": 10, "input_length": "many", "output_length": 1}\n', ["line 2", "input_length", "not a number"]),
    ("negative.jsonl", GOOD + '{"timestamp": 10, "input_length": 5, "output_length": -1}\n', ["line 2", "output_length", "-1"]),
    ("nan_time.jsonl", GOOD + '{"timestamp": NaN, "input_length": 5, "output_length": 1}\n', ["line 2", "JSON", "NaN is not a finite number"]),
    ("negative_time.jsonl", '{"timestamp": -3, "input_length": 5, "output_length": 1}\n', ["line 1", "timestamp", "-3"]),
    ("empty.jsonl", "\n\n", ["line 1", "input_length"]),
    ("deep.jsonl", GOOD + "[" * 100_000 + "\n", ["line 2", "nested deeper"]),
    ("huge_int.jsonl", '{"timestamp": 1, "input_length": ' + "9" * 5000 + ", \"output_length\": 1}\n", ["line 1", "5,000 digits"]),
]


@pytest.mark.parametrize(("name", "text", "needles"), MOONCAKE_BAD, ids=[case[0] for case in MOONCAKE_BAD])
def test_malformed_mooncake_raises_trace_error(tmp_path, name, text, needles):
    path = _write(tmp_path, name, text)
    with pytest.raises(TraceError) as info:
        load_trace(path, "mooncake_jsonl")
    check_message(str(info.value), name, needles, text)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(TraceError, match="nope.csv"):
        load_trace(tmp_path / "nope.csv", "azure_csv")
    path = _write(tmp_path, "t.csv", HEADER)
    with pytest.raises(UserError, match="mooncake_jsonl"):
        load_trace(path, "parquet")


def test_start_past_the_end_is_a_trace_error(tmp_path):
    path = _write(tmp_path, "t.csv", HEADER + "2023-11-16 18:00:00.0,1,2\n2023-11-16 18:00:05.0,1,2\n")
    with pytest.raises(TraceError, match="start_s"):
        TraceArrivals(path=path, format="azure_csv", start_s=60.0).arrival_times(None, 10.0)


def test_missing_optional_data_fails_under_ci_and_skips_elsewhere(tmp_path, monkeypatch):
    from data_files import GENAI_TRACE, optional_file

    monkeypatch.setenv("DCSIM_DATA_DIR", str(tmp_path))  # an empty optional-data directory
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing"):
        optional_file(GENAI_TRACE)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match=str(tmp_path)):
        optional_file(GENAI_TRACE)
