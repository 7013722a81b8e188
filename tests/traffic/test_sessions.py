"""The synthetic session trace (traffic/sessions.py) against its definition and theory,
and a prefix cache on it against the hits the definition implies."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest

from sim.engine.core import simulate
from sim.scenario import parse_scenario
from traffic.sessions import SessionParams, generate_sessions

BLOCK = 512


def by_session(rows: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        out[r["session"]].append(r)
    return out


def test_each_turn_extends_its_history_and_keeps_its_blocks():
    """Turn k's prompt = turn k-1's prompt + its output + new tokens (at least 1), and its
    first ⌊prompt_{k-1} / 512⌋ hashes are turn k-1's; every row has ceil(prompt/512) ids;
    at most 4 distinct system prompts open the sessions (2 blocks of 1,024 tokens)."""
    rows = generate_sessions(SessionParams(sessions_per_s=0.2, duration_s=600), seed=3)
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    for r in rows:
        assert len(r["hash_ids"]) == math.ceil(r["input_length"] / BLOCK)
    for turns in by_session(rows).values():
        for a, b in zip(turns, turns[1:]):
            assert b["turn"] == a["turn"] + 1 and b["timestamp"] >= a["timestamp"]
            assert b["input_length"] > a["input_length"] + a["output_length"]
            whole = a["input_length"] // BLOCK
            assert b["hash_ids"][:whole] == a["hash_ids"][:whole]
            if a["input_length"] % BLOCK:  # a's partial block is its own
                assert a["hash_ids"][whole] not in b["hash_ids"]
    assert len({tuple(t[0]["hash_ids"][:2]) for t in by_session(rows).values()}) <= 4


def test_turns_and_think_times_match_their_distributions():
    """Geometric turns of mean 3.51 (sd √((1−p)/p²), p = 1/3.51) and exponential think
    times of mean 60 s, within 4 standard errors over ~9,000 sessions (timestamps in ms:
    the gaps are rounded by at most 1 ms)."""
    rows = generate_sessions(SessionParams(sessions_per_s=2.5, duration_s=3600), seed=7)
    sessions = by_session(rows)
    turns = np.array([len(t) for t in sessions.values()])
    p = 1 / 3.51
    assert abs(turns.mean() - 3.51) < 4 * math.sqrt((1 - p) / p**2 / len(turns))
    gaps = np.array([(b["timestamp"] - a["timestamp"]) / 1000 for t in sessions.values() for a, b in zip(t, t[1:])])
    assert abs(gaps.mean() - 60.0) < 4 * 60.0 / math.sqrt(len(gaps)) + 0.001


def test_one_replica_hits_what_the_sessions_imply(tmp_path):
    """One replica, one request at a time, an HBM that never evicts: turn k > 0 hits all of
    turn k-1's cacheable blocks, ⌊(prompt_{k-1} − 1) / 512⌋ (its stream goes on), and no
    more (the next block was never a whole cached block); a first turn hits its system
    prompt's 2 blocks when an earlier row opened with them, else nothing."""
    rows = generate_sessions(SessionParams(sessions_per_s=0.3, duration_s=200, think_time_s=20), seed=11)
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected, seen_system, last = [], set(), {}
    for r in rows:
        if r["turn"] == 0:
            expected.append(2 * BLOCK if tuple(r["hash_ids"][:2]) in seen_system else 0)
            seen_system.add(tuple(r["hash_ids"][:2]))
        else:
            expected.append((last[r["session"]] - 1) // BLOCK * BLOCK)
        last[r["session"]] = r["input_length"]
    data = {"name": "s", "seed": 1, "duration_s": rows[-1]["timestamp"] / 1000 + 1, "warmup_s": 0, "drain_s": 100_000,
            "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                                   "arrival": {"kind": "trace", "path": str(path), "format": "mooncake_jsonl"}}},
            "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"],
                                                "replicas": 1, "max_batch": 1, "prefix_cache": {}}]}]}
    got = simulate(parse_scenario(data, "s")).requests.sort_values("request_id")
    assert (got["status"] == "completed").all()
    np.testing.assert_array_equal(got["cached_tokens"].to_numpy(), expected)
    assert sum(expected) > 0


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="session parameters out of range"):
        SessionParams(turns_mean=0.5)


@pytest.mark.parametrize("bad", ['"abc"', "[1, -2]", "[1, 2.5]", "[true]", "{}"])
def test_malformed_hash_ids_name_the_line_and_field(tmp_path, bad):
    """A Mooncake row whose hash_ids is not a list of non-negative integers is refused
    with file:line: hash_ids and what is expected, never echoing the value."""
    from sim.errors import TraceError
    from traffic.traces import load_trace

    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                    f'{{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": {bad}}}\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:2: hash_ids: .*expected a list of at most") as err:
        load_trace(path, "mooncake_jsonl")
    assert "abc" not in str(err.value)


def test_rows_without_hash_ids_have_no_blocks(tmp_path):
    """A Mooncake row without hash_ids reads as no prefix blocks (it never hits); equal
    leading hashes give equal chain keys, a different first hash none in common."""
    from traffic.traces import load_trace

    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n'
                    '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [7, 8, 9]}\n'
                    '{"timestamp": 2, "input_length": 10, "output_length": 1, "hash_ids": [7, 8, 4]}\n'
                    '{"timestamp": 3, "input_length": 10, "output_length": 1, "hash_ids": [8, 7]}\n')
    keys = load_trace(path, "mooncake_jsonl").prefix_keys
    assert keys[0] == ()
    assert keys[1][:2] == keys[2][:2] and keys[1][2] != keys[2][2]
    assert not set(keys[3]) & set(keys[1] + keys[2])
