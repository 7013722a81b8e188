"""Communication, TP and KV-replication physics of the perf model (issue 12, item 3).

Expected values: NVIDIA's measured H100 custom all-reduce times (raw CSV, in the test),
hand arithmetic from the catalog's heads / KV heads, and the published H100 NVLink rate.
The collectives and the TP rule are :mod:`sim.models.parallelism`'s; the hand-calculated
cases of each formula are in test_parallelism.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleets.catalog_io import load_catalog
from sim.errors import PlacementError, UserError
from sim.models.parallelism import allreduce_time_s, scaleup_link
from sim.models.perf import PerfModel
from fleets.placement import place_pool
from data_files import REFERENCE

ALL_REDUCE = REFERENCE / "collectives" / "allreduce_latency.csv"
CAT = load_catalog()


@pytest.mark.parametrize("group", [2, 4, 8])
def test_h100_all_reduce_matches_the_measured_custom_all_reduce(group):
    """Median |relative error| of the H100's fabric curve against every measured message
    size (2 KiB-64 MiB) of NVIDIA's TensorRT-LLM custom all-reduce on H100 stays within 25 %,
    small messages (<= 8 KiB) within 25 % of the raw median, and the largest message runs
    at most at the NVLink rate (raw rows: fleets/data/reference/collectives)."""
    raw = pd.read_csv(ALL_REDUCE)
    rows = raw[(raw["system"] == "h100_sxm") & (raw["num_gpus"] == group)]
    measured = rows.set_index("message_bytes")["latency_us"] * 1e-6
    link = scaleup_link(CAT.accelerator("h100-sxm"))
    fitted = measured[(measured.index >= 2048) & (measured.index <= 64 * 2**20)]
    predicted = np.array([allreduce_time_s(link, float(s), group) for s in fitted.index])
    assert np.median(np.abs(predicted / fitted.to_numpy() - 1)) <= 0.25
    small = measured[measured.index <= 8192].median()
    assert allreduce_time_s(link, 4096.0, group) == pytest.approx(small, rel=0.25)
    biggest = measured.index.max()
    ring_floor_s = 2 * (group - 1) / group * biggest / 450e9  # NVLink 4: 450 GB/s per direction
    assert allreduce_time_s(link, biggest, group) >= ring_floor_s


def test_latency_grows_with_group_and_scale_out_is_slower_than_scale_up():
    h100 = CAT.accelerator("h100-sxm")
    times = [allreduce_time_s(scaleup_link(h100), 0.0, n) for n in (2, 4, 8)]
    assert times[0] < times[1] < times[2]
    for acc in CAT.accelerators.values():
        if acc.scaleup_domain_size > 1:
            assert acc.scaleout_latency_s > acc.scaleup_latency_s, acc.key


def test_tp_must_divide_attention_heads():
    model = CAT.model("llama-3-70b")  # 64 heads
    acc = CAT.accelerator("gb200")  # 72-GPU NVL72 domain
    with pytest.raises(UserError, match="tp=343 but TP must fit one scale-up domain of 72"):
        PerfModel(acc, model, "fp8", tp=343)
    heads_and_allowed = "does not divide the model's 64 attention heads.*Use tp in: 1, 2, 4, 8, 16, 32, 64"
    with pytest.raises(UserError, match=heads_and_allowed):
        PerfModel(acc, model, "fp8", tp=72)
    PerfModel(acc, model, "fp8", tp=64)  # inside a 72-GPU NVL72 domain


@pytest.mark.parametrize("key", ["h100-sxm", "gb200", "tpu-v5e"])
def test_perf_and_placement_allow_the_same_tp(key):
    """One TP rule: on every tp from 1 to 80 the perf model and placement agree, and both
    allow exactly the tp that divide Llama-3-70B's 64 heads and fit the part's scale-up
    domain (8 GPUs on an HGX H100, 72 on NVL72, 256 on a v5e pod: hand-listed below)."""
    model, acc = CAT.model("llama-3-70b"), CAT.accelerator(key)
    by_hand = {"h100-sxm": [1, 2, 4, 8], "gb200": [1, 2, 4, 8, 16, 32, 64], "tpu-v5e": [1, 2, 4, 8, 16, 32, 64]}[key]
    perf_ok, placed_ok = [], []
    for tp in range(1, 81):
        try:
            PerfModel(acc, model, "bf16", tp=tp)
            perf_ok.append(tp)
        except UserError as err:
            assert f"Use tp in: {', '.join(map(str, by_hand))}." in str(err) or "scale-up domain" in str(err), str(err)
        try:
            # pp=16 so that even tp=1 holds the 141 GB of weights (16 x 16 GB on a v5e)
            place_pool(name="p", accelerator=acc, model=model, precision="bf16", tp=tp, pp=16, replicas=1,
                       memory_utilization=1.0)
            placed_ok.append(tp)
        except PlacementError as err:  # refused for its tp, not for memory
            assert "attention heads" in str(err) or "scale-up domain" in str(err), str(err)
    assert perf_ok == placed_ok == by_hand


@pytest.mark.parametrize("tp", [1, 8, 16, 32])
def test_kv_heads_are_replicated_when_tp_exceeds_them(tp):
    model = CAT.model("llama-3-70b")
    copies = max(1, tp // model.kv_heads)  # 8 KV heads: TP16 keeps each head twice
    per_token = 2 * model.layers * model.kv_heads * model.head_dim * 1.0 * copies  # fp8: 1 byte
    perf = PerfModel(CAT.accelerator("gb200"), model, "fp8", tp=tp)
    assert perf.kv_bytes_per_token == pytest.approx(per_token)
