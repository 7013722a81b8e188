"""Fuzz every command and every kind of input file (issue 23), beyond the scenario
mutations of tests/sim/test_fuzz_scenarios.py.

Each family is a hypothesis strategy of :class:`input_cases.Case`: one broken (or
unusual) input, the command that reads it, and what the error must name. Every case is
run by :func:`input_cases.run_case`, which also checks the two security properties: the
marker planted in a broken file never reaches stdout or stderr, and nothing is written
outside ``--out`` (workspace tree and TMPDIR compared before and after).

Families: Azure CSV, Mooncake JSONL and genai CSV traces (through a scenario or
``--trace``), catalog overlays (``--catalog``), calibration points (``validate
--points``, ``calibrate``), sweeps, plans, YAML scalars (YAML 1.2 numbers, dates kept as
text), economics ranges, command-line options, and output targets. The unmarked test
runs QUICK_EXAMPLES per family; the ``slow`` one FUZZ_EXAMPLES (about 800 cases in all).
Under CI the examples are derandomized (tests/conftest.py). Every counterexample found
is kept as a named test in tests/sim/test_bad_input_regressions.py.
"""

from __future__ import annotations

import gzip
import string

import pytest
import yaml
from hypothesis import strategies as st
from input_cases import Case, check_examples, marker, run_case

QUICK_EXAMPLES = 4
FUZZ_EXAMPLES = 100

BASE = {
    "name": "fuzz", "seed": 3, "duration_s": 20, "warmup_s": 2, "drain_s": 30,
    "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                           "arrival": {"kind": "poisson", "rate_per_s": 2}}},
    "fleets": [{"name": "h100", "pools": [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"],
                                           "replicas": 1}]}],
}
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens",
         [f"2023-11-16 18:15:{s:02d}.0000000,{400 + s},{30 + s}" for s in range(8)])
GENAI = ("gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,negative_prompt_length,"
         "num_images_per_prompt,num_inference_steps,checkpoint_model_version_id,num_lora",
         [f"2024-11-19 00:00:{s:02d},TXT_2_IMG,SUCCEED,20.0,G1,60.0,26.0,1.0,30.0,M1,0" for s in range(8)])
MOONCAKE = [f'{{"timestamp": {1000 * s}, "input_length": {400 + s}, "output_length": {30 + s}}}' for s in range(8)]
OVERLAY = ("key,compute_efficiency,memory_bw_tbps", ["h100-sxm,0.5,3.35", "b200,0.5,8.0"])
POINTS = ("system,accelerator,count,model,scenario,metric,value,unit,source,notes",
          [f"S{i},AMD Instinct MI300X-NPS1-SPX-192GB-750W,1,llama2-70b-99.9,Offline,tokens_per_s,{3000 + i},tokens/s,"
           f"src,MLPerf Inference v4.1 closed" for i in range(4)])
words = st.text(alphabet=string.ascii_lowercase, min_size=3, max_size=8)


def dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def trace_scenario(path: str, fmt: str) -> str:
    data = yaml.safe_load(dump(BASE))
    if fmt == "genai_csv":
        data["workloads"] = {"image": {"kind": "image_diffusion", "model": "sdxl",
                                       "arrival": {"kind": "trace", "format": fmt, "path": path, "jitter": False}}}
        data["fleets"][0]["pools"][0].update(serves=["image"], name="image")
    else:
        data["workloads"]["chat"]["arrival"] = {"kind": "trace", "format": fmt, "path": path}
    return dump(data)


# --- breaking a CSV --------------------------------------------------------------------

@st.composite
def broken_csv(draw, header: str, rows: list[str], secret: str, numeric: list[int],
               blank_refused: bool = False) -> tuple[bytes, list[str]]:
    """(file bytes, expected substrings) of a CSV broken one way, ``secret`` planted in
    it; ``numeric``: indices of columns holding numbers; ``blank_refused``: a blank line
    inside the file is itself the error (Azure traces)."""
    rows = list(rows)
    k = draw(st.integers(0, len(rows) - 1))
    line = k + 2
    how = draw(st.sampled_from(["utf16", "latin1", "gzip", "binary", "ragged", "cell", "header", "blank_then_cell",
                                "quoted_then_cell", "empty", "header_only", "huge_cell", "unclosed", "secret_file"]))
    cells = rows[k].split(",")
    col = draw(st.sampled_from(numeric))
    if how in ("utf16", "latin1", "gzip", "binary"):
        text = header + "\n" + "\n".join(rows) + f"\n{secret},1,2\n"
        data = {"utf16": text.encode("utf-16"), "latin1": text.replace(secret, secret + "\xe9").encode("latin-1"),
                "gzip": gzip.compress(text.encode()), "binary": b"\x00\x01" + secret.encode() + b"\x00" * 64}[how]
        return data, [{"utf16": "UTF-16", "latin1": "not UTF-8", "gzip": "gzip", "binary": "NUL bytes"}[how]]
    if how == "ragged":
        rows[k] = ",".join(cells[:-1])
        return (header + "\n" + "\n".join(rows) + "\n").encode(), [f":{line}: ", "field(s)"]
    if how == "cell":
        cells[col] = secret
        rows[k] = ",".join(cells)
        return (header + "\n" + "\n".join(rows) + "\n").encode(), [f":{line}:{col + 1}: ", "not a number"]
    if how == "header":
        names = header.split(",")
        names[col] = secret
        return (",".join(names) + "\n" + "\n".join(rows) + "\n").encode(), [":1", "header"]
    if how == "blank_then_cell":
        blanks = draw(st.integers(1, 3))
        cells[col] = secret
        rows[k] = ",".join(cells)
        body = "\n".join(rows[:k]) + "\n" * (blanks + 1) + "\n".join(rows[k:]) if k else "\n".join(rows)
        if blank_refused and k:
            return (header + "\n" + body + "\n").encode(), [f":{line}: ", "blank line"]
        return (header + "\n" + body + "\n").encode(), [f":{line + (blanks if k else 0)}:{col + 1}: "]
    if how == "quoted_then_cell":
        quoted = list(rows[0].split(","))
        quoted[-1] = f'"{quoted[-1]}\n"'  # a line break inside quotes: the value is intact, the lines shift
        bad = k if k > 0 else 1
        cells = rows[bad].split(",")
        cells[col] = "x" + secret
        rows[0], rows[bad] = ",".join(quoted), ",".join(cells)
        return (header + "\n" + "\n".join(rows) + "\n").encode(), [f":{bad + 3}:{col + 1}: "]
    if how == "empty":
        return b"", [":1", "empty"]
    if how == "header_only":
        return (header + "\n").encode(), [":2", "no data rows"]
    if how == "huge_cell":
        cells[col] = secret * 8000
        rows[k] = ",".join(cells)
        return (header + "\n" + "\n".join(rows) + "\n").encode(), [f":{line}", "longer than"]
    if how == "unclosed":
        cells[col] = '"' + secret
        rows[k] = ",".join(cells)
        return (header + "\n" + "\n".join(rows) + "\n").encode(), [f":{line}", "CSV"]
    return f"root:x:0:0:{secret}:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:{secret}\n".encode(), [":1", "header"]


# --- families ------------------------------------------------------------------------------

@st.composite
def azure_trace(draw) -> Case:
    secret = marker()
    data, expected = draw(broken_csv(*AZURE, secret, [1, 2], blank_refused=True))
    if draw(st.booleans()):  # the trace named by the scenario, or given with --trace
        return Case(["run", "s.yaml", "-q"], {"s.yaml": trace_scenario("t.csv", "azure_csv"), "t.csv": data},
                    ["t.csv", *expected], secret)
    ok = AZURE[0] + "\n" + "\n".join(AZURE[1]) + "\n"
    return Case(["run", "s.yaml", "-q", "--trace", "bad.csv"],
                {"s.yaml": trace_scenario("t.csv", "azure_csv"), "t.csv": ok, "bad.csv": data},
                ["bad.csv", *expected], secret)


@st.composite
def genai_trace(draw) -> Case:
    secret = marker()
    data, expected = draw(broken_csv(*GENAI, secret, [3, 6, 7, 8]))
    return Case(["run", "s.yaml", "-q"], {"s.yaml": trace_scenario("g.csv", "genai_csv"), "g.csv": data},
                ["g.csv", *expected], secret)


@st.composite
def mooncake_trace(draw) -> Case:
    secret = marker()
    rows = list(MOONCAKE)
    k = draw(st.integers(0, len(rows) - 1))
    how = draw(st.sampled_from(["json", "deep", "huge_int", "nan", "text", "array", "missing", "negative", "utf16",
                                "gzip", "secret_file", "long_line"]))
    expected = [f"m.jsonl:{k + 1}"]
    if how == "json":
        rows[k] = rows[k][:-1] + f', "{secret}": [1, 2'
        expected.append("not valid JSON")
    elif how == "deep":
        rows[k] = f'{{"a": {"[" * draw(st.integers(25, 5000))}"{secret}"'
        expected.append("nested deeper")
    elif how == "huge_int":
        rows[k] = rows[k].replace(f"{400 + k}", "9" * draw(st.integers(25, 5000)))
        expected.append("digits")
    elif how == "nan":
        rows[k] = rows[k].replace('"timestamp": ', '"timestamp": NaN, "x": ').replace(f'"x": {1000 * k}', f'"x": "{secret}"')
        expected.append("NaN")
    elif how == "text":
        rows[k] = rows[k].replace(f"{30 + k}}}", f'"{secret}"}}')
        expected += ["output_length", "not a number"]
    elif how == "array":
        rows[k] = f'["{secret}"]'
        expected.append("JSON array")
    elif how == "missing":
        rows[k] = f'{{"timestamp": 5, "{secret}": 1, "output_length": 3}}'
        expected += ["input_length", "missing"]
    elif how == "negative":
        rows[k] = rows[k].replace(f'"timestamp": {1000 * k}', '"timestamp": -4')
        expected += ["timestamp", "-4"]
    elif how == "long_line":
        rows[k] = f'{{"timestamp": 1, "pad": "{secret * 100_000}"}}'
        expected.append("longer than")
    text = "\n".join(rows) + "\n"
    data = {"utf16": text.encode("utf-16"), "gzip": gzip.compress(text.encode()),
            "secret_file": f"{secret}: [unterminated\n".encode()}.get(how, text.encode())
    if how in ("utf16", "gzip"):
        expected = ["m.jsonl", "UTF-16" if how == "utf16" else "gzip"]
    elif how == "secret_file":
        expected = ["m.jsonl:1", "JSON"]
    return Case(["run", "s.yaml", "-q"], {"s.yaml": trace_scenario("m.jsonl", "mooncake_jsonl"), "m.jsonl": data},
                expected, secret)


@st.composite
def overlay(draw) -> Case:
    secret = marker()
    header, rows = OVERLAY
    how = draw(st.sampled_from(["broken", "range", "duplicate", "new_key", "sparse"]))
    if how == "broken":
        data, expected = draw(broken_csv(header, rows, secret, [1, 2]))
        expected = [e for e in expected if e != "no data rows"] or expected
        if expected == [":2", "no data rows"]:
            expected = [":2", "no accelerator rows"]
    elif how == "range":
        column, value = draw(st.sampled_from([
            ("memory_bw_tbps", "0"), ("peak_bf16_tflops", "0"), ("accelerators_per_node", "0"),
            ("memory_gb", "1e18"), ("rack_power_budget_kw", "1e308"), ("price_usd", "1e308"),
            ("tdp_w", "-5"), ("compute_efficiency", "1.5"), ("scaleout_gbps_per_dir", "0"), ("accelerators_per_node", "2.5")]))
        data, expected = f"key,{column}\nh100-sxm,{value}\n".encode(), ["ov.csv:2:2", column]
    elif how == "duplicate":
        data, expected = (header + "\n" + rows[0] + "\n" + rows[0] + "\n").encode(), ["ov.csv:3:1", "again"]
    elif how == "new_key":
        data, expected = f"key,price_usd\nzz-{draw(words)},100\n".encode(), ["ov.csv:2", "empty; a value is required"]
    else:
        data, expected = b"key,price_usd\n" + b"\x00" * (6 << 20), ["ov.csv", "limit is"]
    if how in ("broken",) and expected and expected[0].startswith(":"):
        expected = ["ov.csv" + expected[0]] + expected[1:]
    command = draw(st.sampled_from([["run", "s.yaml", "-q"], ["sweep", "w.yaml", "--out", "o"], ["plan", "p.yaml"]]))
    files = {"s.yaml": dump(BASE), "ov.csv": data,
             "w.yaml": dump({"base": "s.yaml", "grid": {"seed": [1]}}),
             "p.yaml": dump({"duration_s": 20, "demand": BASE["workloads"], "candidates": [{"accelerator": "h100-sxm"}]})}
    return Case([*command, "--catalog", "ov.csv"], files, expected, secret)


@st.composite
def points(draw) -> Case:
    secret = marker()
    header, rows = POINTS
    how = draw(st.sampled_from(["broken", "value", "count", "missing_column"]))
    if how == "broken":
        data, expected = draw(broken_csv(header, rows, secret, [2, 6]))
        expected = ["p.csv" + expected[0] if expected[0].startswith(":") else expected[0], *expected[1:]]
        if "not a number" in expected and ":3: " in expected[0]:
            expected = [expected[0].replace(": ", ""), "count"]
    elif how == "value":
        value = draw(st.sampled_from(["-5", "0", "1e20", "inf", "nan", "1,5"]))
        k = draw(st.integers(0, len(rows) - 1))
        rows = list(rows)
        cells = rows[k].split(",")
        cells[6] = f'"{value}"' if "," in value else value
        rows[k] = ",".join(cells)
        data, expected = (header + "\n" + "\n".join(rows) + "\n").encode(), [f"p.csv:{k + 2}:7", "value"]
    elif how == "count":
        count = draw(st.sampled_from(["0", "100000000000000000000", "-3", "many", "1.5", "8x"]))
        data = (header + "\n" + rows[0].replace(",1,llama", f",{count},llama") + "\n").encode()
        expected = ["p.csv:2:3", "count"]
    else:
        names = header.split(",")
        drop = draw(st.sampled_from(["value", "count", "system", "source"]))
        keep = [i for i, n in enumerate(names) if n != drop]
        data = (",".join(names[i] for i in keep) + "\n" + "\n".join(",".join(r.split(",")[i] for i in keep)
                                                                    for r in rows) + "\n").encode()
        expected = ["p.csv:1", drop]
    command = draw(st.sampled_from([["validate", "--points", "p.csv", "--no-fit", "--no-server", "--out", "o"],
                                    ["calibrate", "p.csv", "--out", "ov.csv"]]))
    return Case(command, {"p.csv": data}, expected, secret)


@st.composite
def sweep(draw) -> Case:
    secret = marker()
    grid = {"workloads.chat.arrival.rate_per_s": [1, 2]}
    spec = {"base": "s.yaml", "grid": grid}
    files = {"s.yaml": dump(BASE)}
    how = draw(st.sampled_from(["duplicate", "seed_and_seeds", "secret_base", "secret_text_base", "unknown_path",
                                "bad_set", "huge_seeds", "grid_not_list", "seed_grid_text"]))
    if how == "duplicate":
        grid["workloads.chat.arrival.rate_per_s"] = [2, 2.0]
        expected = ["same value twice"]
    elif how == "seed_and_seeds":
        grid["seed"] = [1, 2]
        spec["seeds"] = draw(st.integers(2, 5))
        expected = ["grid sweeps 'seed'"]
    elif how == "secret_base":
        spec["base"] = "secret.yaml"
        files["secret.yaml"] = dump({secret: {"token": secret}, f"api_{secret}": secret})
        expected = ["secret.yaml", "not a scenario file"]
    elif how == "secret_text_base":
        spec["base"] = "secret.txt"
        files["secret.txt"] = f"{secret} = [\n  '{secret}'\n"
        expected = ["secret.txt"]
    elif how == "unknown_path":
        grid[f"workloads.zz{draw(words)}.arrival.rate_per_s"] = [1]
        expected = ["grid field"]
    elif how == "bad_set":
        spec["set"] = {"economics.depreciation_years": 1e-320}
        expected = ["depreciation_years"]
    elif how == "huge_seeds":
        spec["seeds"] = draw(st.sampled_from([0, 10**6, -2, "3", [1, 1]]))
        expected = ["seeds"]
    elif how == "grid_not_list":
        grid["economics.pue"] = draw(st.sampled_from([1.2, "x", {}]))
        expected = ["economics.pue"]
    else:
        grid["seed"] = ["one"]
        expected = ["seed"]
    files["w.yaml"] = dump(spec)
    return Case(["sweep", "w.yaml", "--out", "o"], files, expected, secret)


@st.composite
def plan(draw) -> Case:
    spec = {"name": "p", "duration_s": 20, "demand": dict(BASE["workloads"]),
            "candidates": [{"accelerator": "h100-sxm"}], "search": {"max_replicas_per_type": 2}}
    how = draw(st.sampled_from(["quarter", "rate_scale", "duplicate_quarter", "layout", "duplicate_candidate",
                                "precision", "router", "seed", "rental", "depreciation", "price"]))
    if how == "quarter":
        spec["growth"] = [{"quarter": draw(st.sampled_from(["q/../../../x", "2026/Q1", "..", ".hidden", "a b", ""]))}]
        expected = ["growth.0.quarter"]
    elif how == "rate_scale":
        spec["growth"] = [{"quarter": "q1", "rate_scale": draw(st.sampled_from([-1, 0, 1e300, {"chat": -2}]))}]
        expected = ["growth.0.rate_scale"]
    elif how == "duplicate_quarter":
        spec["growth"] = [{"quarter": "q1"}, {"quarter": "q1"}]
        expected = ["appear twice"]
    elif how == "layout":
        spec["candidates"][0]["layouts"] = {f"zz{draw(words)}": {"tp": 2}}
        expected = ["layouts"]
    elif how == "duplicate_candidate":
        spec["candidates"] = [{"accelerator": "h100-sxm"}, {"accelerator": "h100-sxm", "tp": 2}]
        expected = ["listed twice"]
    elif how == "precision":
        spec["candidates"][0]["precision"] = draw(words)
        expected = ["candidates.0.precision"]
    elif how == "router":
        spec["router"] = draw(words)
        expected = ["router"]
    elif how == "seed":
        spec["seed"] = draw(st.sampled_from([-1, 2**63 - 1]))
        expected = ["seed"]
    elif how == "rental":
        spec["economics"] = {"ownership": "rent", "rental_usd_per_accelerator_hour": {f"zz{draw(words)}": 2.0}}
        expected = ["rental_usd_per_accelerator_hour"]
    elif how == "depreciation":
        spec["economics"] = {"depreciation_years": draw(st.sampled_from([1e-320, 0, -1, 1e300]))}
        expected = ["depreciation_years"]
    else:
        spec["candidates"][0]["price_usd"] = draw(st.sampled_from([1e308, -1]))
        expected = ["price_usd"]
    return Case(["plan", "p.yaml", "--out", "o"], {"p.yaml": dump(spec)}, expected)


@st.composite
def yaml_scalars(draw) -> Case:
    """YAML 1.2 numbers and dates: accepted where they make sense, clear errors elsewhere."""
    text = dump(BASE)
    how = draw(st.sampled_from(["date_description", "float_exponent", "int_exponent", "bad_date_tag", "date_number",
                                "on_bool", "sexagesimal", "underscore_int"]))
    if how == "date_description":
        return Case(["run", "s.yaml", "-q", "--out", "o"], {"s.yaml": text.replace("name: fuzz", "name: fuzz\n"
                    "description: 2024-02-30")}, [], out="o", code=0)
    if how == "float_exponent":
        return Case(["run", "s.yaml", "-q", "--out", "o"], {"s.yaml": text + "economics: {facility_capex_usd_per_mw: 11.7e6}\n"},
                    [], out="o", code=0)
    if how == "int_exponent":
        return Case(["run", "s.yaml", "-q", "--out", "o"], {"s.yaml": text.replace("duration_s: 20", "duration_s: 2e1")},
                    [], out="o", code=0)
    if how == "bad_date_tag":
        return Case(["run", "s.yaml"], {"s.yaml": text.replace("name: fuzz", "name: !!timestamp 2024-02-30")},
                    ["line 1", "date or time"])
    if how == "date_number":
        return Case(["run", "s.yaml"], {"s.yaml": text.replace("duration_s: 20", "duration_s: 2024-02-30")},
                    ["duration_s"])
    if how == "on_bool":
        return Case(["run", "s.yaml"], {"s.yaml": text + "engine: {stream: on, mode: yes}\n"}, ["engine.mode"])
    if how == "sexagesimal":
        return Case(["run", "s.yaml"], {"s.yaml": text.replace("duration_s: 20", "duration_s: 1:30")}, ["duration_s"])
    return Case(["run", "s.yaml"], {"s.yaml": text.replace("seed: 3", "seed: 1_000")}, ["seed"])


@st.composite
def economics(draw) -> Case:
    field, value = draw(st.sampled_from([
        ("depreciation_years", 1e-320), ("depreciation_years", 0.0), ("facility_depreciation_years", 1e-300),
        ("facility_capex_usd_per_mw", 1e308), ("electricity_usd_per_kwh", -1.0), ("network_capex_usd_per_node", 1e300),
        ("pue", 0.5), ("discount_rate_per_year", 5.0), ("facility_power_limit_mw", 0.0)]))
    data = yaml.safe_load(dump(BASE))
    if draw(st.booleans()):
        data["economics"] = {field: value}
        where = f"economics.{field}"
    elif draw(st.booleans()):
        data["economics"] = {"rental_usd_per_accelerator_hour": {f"zz{draw(words)}": 1.0}}
        where = "economics.rental_usd_per_accelerator_hour"
    else:
        data["fleets"][0]["pools"][0]["price_usd"] = draw(st.sampled_from([1e308, -5.0, 1e10]))
        where = "fleets.0.pools.0.price_usd"
    return Case(["run", "s.yaml", "-q"], {"s.yaml": dump(data)}, [where])


@st.composite
def options(draw) -> Case:
    files = {"s.yaml": dump(BASE), "w.yaml": dump({"base": "s.yaml", "grid": {"seed": [1]}})}
    option, value, expected = draw(st.sampled_from([
        ("--workers", "0", "--workers"), ("--workers", "-3", "--workers"), ("--workers", "100000", "--workers"),
        ("--cells", "0", "--cells"), ("--cells", "-1", "--cells"), ("--cells", "5000", "--cells"),
        ("--cells", "2", "--cells 2"), ("--seed", "-1", "seed"), ("--seed", str(2**63), "seed"),
        ("--duration-s", "0", "duration_s"), ("--duration-s", "-5", "duration_s"), ("--duration-s", "nan", "duration"),
        ("--duration-s", "inf", "duration"), ("--duration-s", "1e300", "duration_s"), ("--trace", "nope.csv", "--trace"),
        ("--trace", ".", "--trace"), ("--dask", "tcp://host", "--dask"), ("--catalog", "nope.csv", "nope.csv")]))
    args = ["run", "s.yaml", "-q", option, value]
    if option == "--workers":
        args += ["--cells", "1"]
        if draw(st.booleans()):
            args = ["sweep", "w.yaml", "--out", "o", option, value]
    if option == "--dask":
        args += ["--cells", "1"]
    return Case(args, files, [expected])


@st.composite
def outputs(draw) -> Case:
    """Output targets: links, devices, the working directory, other people's files."""
    files = {"s.yaml": dump(BASE), "w.yaml": dump({"base": "s.yaml", "grid": {"seed": [1]}}),
             "mine/notes.txt": "my notes\n", "mine/sweep.yaml": "mine\n", "planner.csv": "my,own\n1,2\n",
             "report.html": "<html>mine</html>\n", "ov.csv": "key,price_usd\nh100-sxm,1\n"}
    how = draw(st.sampled_from(["link", "device", "cwd", "parent", "user_dir", "user_file", "file_as_dir"]))
    command = draw(st.sampled_from(["run", "sweep", "plan", "validate", "calibrate", "export", "report"]))
    target = {"link": "link", "device": "/dev/null", "cwd": ".", "parent": "..", "user_dir": "mine",
              "user_file": "planner.csv", "file_as_dir": "s.yaml"}[how]
    expected = {"link": "is a symlink", "device": "character device", "cwd": "current directory",
                "parent": "current directory", "user_dir": "did not write", "user_file": "not written by dcsim",
                "file_as_dir": "regular file"}[how]
    files["p.yaml"] = dump({"duration_s": 20, "demand": BASE["workloads"], "candidates": [{"accelerator": "h100-sxm"}]})
    directory_target = command in ("run", "sweep", "plan", "validate")
    if how in ("user_file",) and directory_target or how in ("user_dir", "cwd", "parent") and not directory_target:
        how, target, expected = "link", "link", "is a symlink"
    if how == "file_as_dir" and not directory_target:
        target, expected = "mine", "directory"
    args = {"run": ["run", "s.yaml", "-q", "--out", target], "sweep": ["sweep", "w.yaml", "--out", target],
            "plan": ["plan", "p.yaml", "--out", target], "validate": ["validate", "--no-fit", "--no-server", "--out", target],
            "calibrate": ["calibrate", "ov.csv", "--out", target], "export": ["export", "mine", "--planner", target],
            "report": ["report", "mine", "--out", target]}[command]
    links = {"link": "mine"} if how == "link" else {}
    return Case(args, files, [expected], links=links)


FAMILIES = {
    "azure_trace": azure_trace, "genai_trace": genai_trace, "mooncake_trace": mooncake_trace, "overlay": overlay,
    "points": points, "sweep": sweep, "plan": plan, "yaml_scalars": yaml_scalars, "economics": economics,
    "options": options, "outputs": outputs,
}


def _check_family(family: str, directory, examples: int) -> int:
    """Run up to ``examples`` cases of ``family``; returns how many ran, every one
    handled (an assertion fails otherwise)."""
    ran = check_examples(FAMILIES[family](), examples, lambda case: run_case(case, directory))
    print(f"{family}: {ran} cases, all handled")
    return ran


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("inputs")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fuzz_inputs_quick(family, base_dir):
    """A few cases per family on every test run."""
    _check_family(family, base_dir, QUICK_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fuzz_inputs_full(family, base_dir):
    """FUZZ_EXAMPLES cases per family (fewer where a family has fewer distinct cases)."""
    _check_family(family, base_dir, FUZZ_EXAMPLES)
