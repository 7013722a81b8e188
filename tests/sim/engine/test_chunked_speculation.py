"""Chunked prefill with speculative decoding (docs/serving.md, "Chunked prefill with
speculative decoding"): an iteration holding a prompt chunk beside a sequence that
verifies k + 1 tokens, for every drafter on the pool (n-gram: none; a draft model; an
EAGLE or MTP head), timed by hand from the catalog CSV rows; the budget the verifying
decode takes (k + 1 tokens); the decode's steps and KV growth around the chunks; a split
deployment's prefill pool running its drafter's prefill chunk by chunk; and a drafter on a
pool of its own."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from sim.engine.core import simulate

ROOT = Path(__file__).resolve().parents[3]
TP, BPP = 4, 2.0  # Llama-3.1-70B on four H100s, BF16 weights, KV and activations


def _row(table: str, key: str) -> dict:
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


H100 = _row("accelerators", "h100-sxm")
L70, L8 = _row("models", "llama-3.1-70b"), _row("models", "llama-3.1-8b")
NDR = _row("fabrics", "ib-ndr-400")
VOCAB = 128_256  # Llama 3's vocabulary (the head's output projection), given as head_vocab
K, ALPHA = 3, 0.5
Q = K + 1  # tokens a decoding sequence verifies per step
G_NUM = round((1 + ALPHA + ALPHA**2 + ALPHA**3) * 1024)  # E[L] = 1.875 tokens a step, to 1/1024
T0 = float(H100["iteration_overhead_us"]) * 1e-6


def drafter_shape(method: str) -> tuple[dict, float, int] | None:
    """(the CSV row whose attention shape it has, its parameters, its layers), None for n-gram.
    An EAGLE / MTP head: one decoder layer of the target's shape, (params − 2·vocab·hidden)
    / layers, plus the output projection it reads (vocab × hidden)."""
    if method == "ngram":
        return None
    if method == "draft_model":
        return L8, float(L8["params_b"]) * 1e9, int(L8["layers"])
    projection = VOCAB * int(L70["hidden"])
    return L70, (float(L70["params_b"]) * 1e9 - 2 * projection) / int(L70["layers"]) + projection, 1


def forward_s(row: dict, params: float, layers: int, tokens: float, pairs: float, kv_tokens: float,
              overhead_s: float, gpus: int = TP) -> float:
    """One forward on ``gpus`` H100s (BF16) from the raw CSV numbers: ``tokens`` through the
    linear layers (2 FLOP per parameter), ``pairs`` query-key pairs (4 FLOP per head
    dimension per layer: QK and PV), the weights and ``kv_tokens`` tokens' KV read;
    max(FLOP / (peak·η_c), bytes / (bandwidth·η_m)) + 2 ring all-reduces of the tokens'
    activations per layer (gpus > 1) + ``overhead_s``."""
    heads, kv_heads, head_dim, hidden = (int(row[k]) for k in ("heads", "kv_heads", "head_dim", "hidden"))
    flops = 2 * params * tokens + 4 * layers * heads * head_dim * pairs
    bytes_moved = params * BPP + 2 * layers * kv_heads * head_dim * BPP * kv_tokens
    peak = float(H100["peak_bf16_tflops"]) * 1e12 * gpus * float(H100["compute_efficiency"])
    bw = float(H100["memory_bw_tbps"]) * 1e12 * gpus * float(H100["bandwidth_efficiency"])
    comm = 0.0
    if gpus > 1:
        latency = float(H100["scaleup_latency_us"]) * 1e-6 + float(H100["scaleup_latency_log2_us"]) * 1e-6 * math.log2(gpus)
        wire = 2 * (gpus - 1) / gpus * tokens * hidden * BPP / (float(H100["scaleup_gbps_per_dir"]) * 1e9
                                                                 * float(H100["scaleup_bus_efficiency"]))
        comm = 2 * layers * (latency + wire)
    return max(flops / peak, bytes_moved / bw) + comm + overhead_s


def target_s(m: int, c: int, decoders: int, context: float) -> float:
    """The target's forward in an iteration of a chunk of m prompt tokens after c prefilled
    ones (causal pairs m²/2 + m·c, the c tokens' KV read) beside ``decoders`` sequences
    verifying K + 1 tokens each over ``context`` tokens in all (each token attending to its
    sequence's context, which it reads: the mixed iteration's upper bound)."""
    return forward_s(L70, float(L70["params_b"]) * 1e9, int(L70["layers"]), m + decoders * Q,
                     0.5 * m * m + m * c + Q * context, Q * context + m + c, T0)


def iteration_s(method: str, m: int, c: int, decoders: int, context: float) -> float:
    """A chunk iteration on a pool whose drafter is ``method``: the target's forward, then
    the drafter's prefill of the same chunk (its own KV over the c tokens before it) and
    its K forwards for the decoders, on the target's four GPUs and in the same engine
    iteration (no second t_0)."""
    t = target_s(m, c, decoders, context)
    shape = drafter_shape(method)
    if shape is None:
        return t
    row, params, layers = shape
    t += forward_s(row, params, layers, m, 0.5 * m * m + m * c, m + c, 0.0)
    if decoders:
        t += K * forward_s(row, params, layers, decoders, context, context, 0.0)
    return t


def step_s(method: str, context: float, batch: int = 1) -> float:
    """One verification step of ``batch`` sequences holding ``context`` tokens in all: the
    target's forward over K + 1 tokens each (pairs with the context and among themselves,
    the KV read once) and K drafter forwards of one token each."""
    t = forward_s(L70, float(L70["params_b"]) * 1e9, int(L70["layers"]), batch * Q,
                  Q * context + batch * Q * (Q - 1) / 2, context, T0)
    shape = drafter_shape(method)
    if shape is not None:
        row, params, layers = shape
        t += K * forward_s(row, params, layers, batch, context, context, 0.0)
    return t


def kv(counter: int) -> int:
    """KV tokens every running sequence has gained after ``counter`` iterations: ⌊I·g⌋."""
    return counter * G_NUM // 1024


PROMPT_A, OUTPUT_A = 100, 2000  # the speculating decode
PROMPT_B, CHUNK = 8200, 2048  # the long prompt and its chunks: the budget less A's K + 1 tokens
BUDGET = CHUNK + Q
SPLIT = [(min(CHUNK, PROMPT_B - c), c) for c in range(0, PROMPT_B, CHUNK)]  # (m, c): 4 × 2,048 then 8


def speculation(method: str) -> dict:
    spec = {"method": method, "draft_tokens": K, "acceptance": ALPHA}
    if method in ("eagle", "mtp"):
        spec.update(head_vocab=VOCAB, head_layers=1)
    if method == "draft_model":
        spec["draft_model"] = "llama-3.1-8b"
    return spec


def _scenario(tmp_path, mode: str, method: str, rows: str, pools: list, **wl_extra):
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b", "speculation": speculation(method),
                   "arrival": {"kind": "trace", "path": str(trace), "format": "azure_csv"}, **wl_extra}}
    return make_scenario(wl, pools, duration_s=60.0, engine={"mode": mode})


POOL = {"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": TP, "precision": "bf16",
        "max_batch": 8, "prefill_chunk_tokens": BUDGET}
OUTPUT_B = 50


def two(output_b: int) -> str:
    return (f"2023-11-16 18:00:00.0000000,{PROMPT_A},{OUTPUT_A}\n"
            f"2023-11-16 18:00:00.5000000,{PROMPT_B},{output_b}\n")


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle", "mtp"])
def test_chunks_beside_a_speculating_decode_by_hand(tmp_path, mode, method):
    """A (100 tokens) is prefilled alone in one chunk, then verifies K + 1 = 4 tokens a
    step, its KV growing ⌊I·g⌋ (g = 1.875) after I iterations; B (8,192 tokens) arrives
    at 0.5 s and is admitted at the first boundary after: with a budget of 2,052 tokens,
    A's verification takes 4, so B (8,200 tokens) runs in four chunks of 2,048 and one of
    8 (a budget counting one token for A would give four chunks), each beside A's step
    (priced as one iteration: target, drafter prefill of the chunk, drafter forwards for
    A). A's steps count the chunk iterations. B then holds its prompt and the last
    chunk's step of KV (8,192 + ⌊I·g⌋ − ⌊(I−1)·g⌋) and verifies beside A until its drawn
    steps are done; A finishes after its own."""
    run = simulate(_scenario(tmp_path, mode, method, two(OUTPUT_B), [POOL]))
    req = run.requests.sort_values("arrival_at_s").reset_index(drop=True)
    a, b = req.iloc[0], req.iloc[1]
    assert (a["status"], b["status"]) == ("completed", "completed")
    t = a["arrival_at_s"] + iteration_s(method, PROMPT_A, 0, 0, 0.0)
    assert a["first_token_at_s"] == pytest.approx(t, rel=1e-9)
    # A alone: steps from counter 1, contexts 100 + ⌊g⌋ + j·g (the closed form's growth)
    counter, j = 1, 0
    while t < b["arrival_at_s"]:
        t += step_s(method, PROMPT_A + kv(1) + j * G_NUM / 1024)
        counter, j = counter + 1, j + 1
    assert b["admitted_at_s"] == pytest.approx(t, rel=1e-9)
    chunks = [iteration_s(method, m, c, 1, PROMPT_A + kv(counter + i)) for i, (m, c) in enumerate(SPLIT)]
    assert len(chunks) == 5
    assert b["first_token_at_s"] - b["admitted_at_s"] == pytest.approx(sum(chunks), rel=1e-9)
    # B's drawn steps beside A, both growing g a step from counter + 4 (every iteration
    # after a prompt's last chunk is a step; a sequence's first chunk-free step is the next)
    t += sum(chunks)
    after = counter + len(chunks)
    steps_b = int(b["steps"])
    both = PROMPT_A + kv(after) + PROMPT_B + kv(after) - kv(after - 1)
    t += sum(step_s(method, both + 2 * i * G_NUM / 1024, batch=2) for i in range(steps_b))
    assert b["done_at_s"] == pytest.approx(t, rel=1e-9)
    # the rest of A's drawn steps, alone again (every iteration after its prefill is one)
    left = int(a["steps"]) - (counter - 1) - len(chunks) - steps_b
    assert left > 0
    after += steps_b
    t += sum(step_s(method, PROMPT_A + kv(after) + i * G_NUM / 1024) for i in range(left))
    assert a["done_at_s"] == pytest.approx(t, rel=1e-9)


def test_the_drafter_prices_each_chunk():
    """The drafter's share of a chunk iteration (its prefill of the chunk and its forwards
    for the verifying decode) is what separates the methods: a draft model's 8B forwards
    cost more than a one-layer head's, which cost more than n-gram's nothing."""
    ngram, head, draft = (iteration_s(m, CHUNK, 2 * CHUNK, 1, 3000.0) for m in ("ngram", "eagle", "draft_model"))
    assert ngram < head < draft
    # the head's prefill of a 2,048-token chunk: about 1/80 of the target's layers plus the projection
    assert head - ngram < 0.1 * ngram


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_prefill_pool_runs_its_drafters_prefill_chunk_by_chunk(tmp_path, mode):
    """A split deployment whose workload speculates with a draft model: the prefill pool
    holds the drafter and prefills the prompt into its KV cache beside the target's, chunk
    by chunk (vLLM skips the draft tokens there but runs the draft prefill: PR #39266); no
    decodes there, so the whole budget of 2,048 goes to the chunks. TTFT = five iterations
    (4 × 2,048 tokens, then 8) of target + drafter prefill."""
    side = {"accelerator": "h100-sxm", "replicas": 1, "tp": TP, "precision": "bf16", "max_batch": 8}
    pools = [{"name": "prefill", "serves": ["chat:prefill"], "prefill_chunk_tokens": CHUNK, **side},
             {"name": "decode", "serves": ["chat:decode"], **side}]
    sc = _scenario(tmp_path, mode, "draft_model", f"2023-11-16 18:00:00.2500000,{PROMPT_B},4\n", pools,
                   disaggregation={"decode_choice": "at_handoff", "kv_transfer": "after_prefill"})
    row = simulate(sc).requests.iloc[0]
    assert row["status"] == "completed" and row["decode_pool"] == "decode"
    chunks = [iteration_s("draft_model", m, c, 0, 0.0) for m, c in SPLIT]
    assert row["ttft_s"] == pytest.approx(sum(chunks), rel=1e-9)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_drafter_on_a_pool_of_its_own_prefills_the_chunks_beside_the_target(tmp_path, mode):
    """The 8B draft model on one H100 of its own (paired with the target replica, over
    NDR): a chunk iteration beside A is the draft pool's K forwards for A (its t_0 once),
    the link's round trip (2α + (K + 2)·4 B / β), then the longer of the target's forward
    and the draft pool's prefill of the chunk (with its t_0): the serial step of
    sim.models.speculation.RemoteDraft with the chunk in the target's forward."""
    pools = [dict(POOL, scaleout_fabric="ib-ndr-400"),
             {"name": "drafter", "accelerator": "h100-sxm", "serves": ["chat:draft"], "replicas": 1, "tp": 1,
              "precision": "bf16", "scaleout_fabric": "ib-ndr-400"}]
    run = simulate(_scenario(tmp_path, mode, "draft_model", two(1), pools))
    req = run.requests.sort_values("arrival_at_s").reset_index(drop=True)
    a, b = req.iloc[0], req.iloc[1]
    p8, l8 = float(L8["params_b"]) * 1e9, int(L8["layers"])
    link = 2 * float(NDR["latency_us"]) * 1e-6 + (K + 2) * 4 / (float(NDR["gbps_per_dir_per_gpu"]) * 1e9)

    busy: list[float] = []  # the draft pool's work, iteration by iteration

    def drafts_s(context: float) -> float:  # its K forwards for A and its t_0, once per step
        return K * forward_s(L8, p8, l8, 1, context, context, 0.0, gpus=1) + T0

    def chunk_s(m: int, c: int, decoders: int, context: float) -> float:
        prefill = forward_s(L8, p8, l8, m, 0.5 * m * m + m * c, m + c, T0, gpus=1)
        if not decoders:
            busy.append(prefill)
            return max(target_s(m, c, 0, 0.0), prefill)
        busy.extend((prefill, drafts_s(context)))
        return drafts_s(context) + link + max(target_s(m, c, decoders, context), prefill)

    def remote_step_s(context: float) -> float:
        verify = forward_s(L70, float(L70["params_b"]) * 1e9, int(L70["layers"]), Q, Q * context + Q * (Q - 1) / 2,
                           context, T0)
        busy.append(drafts_s(context))
        return verify + drafts_s(context) + link

    t = a["arrival_at_s"] + chunk_s(PROMPT_A, 0, 0, 0.0)
    assert a["first_token_at_s"] == pytest.approx(t, rel=1e-9)
    counter, j = 1, 0
    while t < b["arrival_at_s"]:
        t += remote_step_s(PROMPT_A + kv(1) + j * G_NUM / 1024)
        counter, j = counter + 1, j + 1
    assert b["admitted_at_s"] == pytest.approx(t, rel=1e-9)
    chunks = [chunk_s(m, c, 1, PROMPT_A + kv(counter + i)) for i, (m, c) in enumerate(SPLIT)]
    assert b["first_token_at_s"] - b["admitted_at_s"] == pytest.approx(sum(chunks), rel=1e-9)
    after = counter + len(chunks)
    t += sum(chunks) + sum(remote_step_s(PROMPT_A + kv(after) + i * G_NUM / 1024)
                           for i in range(int(a["steps"]) - (counter - 1) - len(chunks)))
    assert a["done_at_s"] == pytest.approx(t, rel=1e-9)
    # the draft pool did its prefill of A and of B's four chunks and K forwards per step of A, nothing else
    assert run.pools.set_index("pool").loc["drafter", "busy_total_s"] == pytest.approx(sum(busy), rel=1e-9)
