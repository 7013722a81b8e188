"""Refused input of the two serving features (split prefill/decode deployments and
speculative decoding): exit code 2, a message naming the file, the field and what is
allowed, no traceback and nothing written."""

from __future__ import annotations

import copy

import pytest
import yaml
from cli_cases import dcsim

BASE = {
    "name": "features",
    "seed": 3,
    "duration_s": 10,
    "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                           "arrival": {"kind": "poisson", "rate_per_s": 1}}},
    "fleets": [{"name": "split", "pools": [
        {"name": "p", "accelerator": "h100-sxm", "serves": ["chat:prefill"], "replicas": 1},
        {"name": "d", "accelerator": "h200", "serves": ["chat:decode"], "replicas": 1}]}],
}


def refused(tmp_path, change) -> str:
    data = copy.deepcopy(BASE)
    change(data)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    code, stdout, stderr = dcsim(["run", path, "-q", "--out", out])
    assert code == 2, (stdout, stderr)
    assert "Traceback" not in stderr and not out.exists()
    assert str(path) in stderr
    return stderr


def pools(data):
    return data["fleets"][0]["pools"]


def test_the_base_scenario_runs(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(BASE, sort_keys=False))
    code, _, stderr = dcsim(["run", path, "-q"])
    assert code == 0, stderr


CASES = {
    "one side only": (lambda d: pools(d).pop(1), ["no pool serves 'chat:decode'", "both sides"]),
    "both sides on one pool": (lambda d: pools(d)[0].update(serves=["chat:prefill", "chat:decode"]),
                               ["one side (prefill or decode)"]),
    "whole and split": (lambda d: pools(d).append({"name": "w", "accelerator": "h100-sxm", "serves": ["chat"],
                                                   "replicas": 1}), ["served whole", "one way"]),
    "unknown side": (lambda d: pools(d)[0].update(serves=["chat:encode"]), ["stage 'encode'", "'prefill', 'decode'"]),
    "kv precision": (lambda d: pools(d)[1].update(kv_precision="bf16"), ["kv_precision", "p: fp8", "d: bf16"]),
    "best of k": (lambda d: d["workloads"]["chat"].update(best_of_k=2), ["best_of_k > 1"]),
    "unknown fabric": (lambda d: pools(d)[0].update(scaleout_fabric="ib-hdr"), ["scaleout_fabric", "ib-hdr",
                                                                              "ib-ndr-400"]),
    "unknown handoff": (lambda d: d["workloads"]["chat"].update(disaggregation={"decode_choice": "later"}),
                        ["disaggregation.decode_choice", "at_prefill"]),
    "draft model missing": (lambda d: d["workloads"]["chat"].update(
        speculation={"method": "draft_model", "draft_tokens": 2, "acceptance": 0.7}), ["speculation", "draft_model"]),
    "head vocab missing": (lambda d: d["workloads"]["chat"].update(
        speculation={"method": "eagle", "draft_tokens": 2, "acceptance": 0.7}), ["head_vocab"]),
    "acceptance list length": (lambda d: d["workloads"]["chat"].update(
        speculation={"method": "ngram", "draft_tokens": 3, "acceptance": [0.9, 0.8]}),
        ["one value per draft position", "draft_tokens = 3"]),
    "acceptance above one": (lambda d: d["workloads"]["chat"].update(
        speculation={"method": "ngram", "draft_tokens": 3, "acceptance": 1.5}), ["acceptance", "[0, 1]"]),
    "unknown draft model": (lambda d: d["workloads"]["chat"].update(
        speculation={"method": "draft_model", "draft_tokens": 2, "acceptance": 0.7, "draft_model": "llama-9"}),
        ["speculation.draft_model", "llama-9", "llama-3.1-8b"]),
    "draft of another kind": (lambda d: d["workloads"]["chat"].update(
        speculation={"method": "draft_model", "draft_tokens": 2, "acceptance": 0.7, "draft_model": "sdxl"}),
        ["speculation.draft_model", "sdxl", "autoregressive"]),
    "too many draft tokens": (lambda d: d["workloads"]["chat"].update(
        speculation={"method": "ngram", "draft_tokens": 40, "acceptance": 0.7}), ["draft_tokens", "16"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_with_a_clear_message(tmp_path, case):
    change, words = CASES[case]
    message = refused(tmp_path, change)
    for word in words:
        assert word in message, (word, message)
