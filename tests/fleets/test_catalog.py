"""Catalog: sources and statuses on every row, SI conversion, model arithmetic."""

import re

import pytest

from fleets.catalog import (BYTES_PER_PARAM, EFFICIENCY_STATUS_WORDS, PRECISIONS, STATUS_WORDS,
                            activation_bytes_estimate)
from fleets.catalog_io import load_catalog
from sim.errors import UserError

CATALOG = load_catalog()
ACCELERATOR_KEYS = {"h100-sxm", "h200", "h200-nvl", "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi350x",
                    "mi355x", "rtx-pro-6000-bse", "l40s", "l4", "arc-pro-b60", "tpu-v5e",
                    "tpu-v6e", "tpu7x", "gaudi3", "trainium2", "groq-lpu", "cerebras-wse3"}
MODEL_KEYS = {"llama-3-8b", "llama-3.1-8b", "llama-3-70b", "llama-3.1-70b", "llama-3.3-70b", "llama-2-70b", "llama-3.1-405b", "mixtral-8x7b",
              "deepseek-v3", "deepseek-r1", "gpt-oss-120b", "gpt-oss-20b", "qwen3-32b", "qwen3-235b-a22b",
              "llama-4-scout", "llama-4-maverick",
              "llada-8b", "sdxl", "flux-1-dev", "wan2.1-t2v-14b", "wan2.1-t2v-1.3b", "wan2.2-t2v-a14b", "verifier",
              "clip-l-text", "openclip-bigg-text", "t5-xxl-encoder", "umt5-xxl-encoder",
              "sdxl-vae-decoder", "flux-vae-decoder", "wan-vae-decoder", "sd-safety-checker"}


def test_catalog_has_every_requested_key():
    assert set(CATALOG.accelerators) == ACCELERATOR_KEYS
    assert set(CATALOG.models) == MODEL_KEYS


@pytest.mark.parametrize("key", sorted(ACCELERATOR_KEYS))
def test_accelerator_rows_have_sources_and_statuses(key):
    acc = CATALOG.accelerator(key)
    for source in (acc.spec_source, acc.price_source, acc.power_source, acc.network_source,
                   acc.efficiency_source):
        assert source.strip()
    for status in (acc.status, acc.price_status, acc.power_status, acc.network_status):
        assert status.lower().startswith(STATUS_WORDS)
    assert acc.efficiency_status.startswith(EFFICIENCY_STATUS_WORDS)


@pytest.mark.parametrize("key", sorted(ACCELERATOR_KEYS))
def test_no_row_carries_a_placeholder_efficiency(key):
    """Issue 12: no 'H100 value until calibrated'; a transferred row names its donor chips
    and carries a band, a calibrated row names its MLPerf points."""
    acc = CATALOG.accelerator(key)
    assert "until calibrated" not in acc.efficiency_source + acc.efficiency_status
    assert (acc.compute_efficiency, acc.bandwidth_efficiency) != (0.688, 0.877)
    if acc.efficiency_status.startswith("transferred"):
        assert "transferred" in acc.efficiency_source and acc.efficiency_band_pct > 0
    if acc.efficiency_status.startswith("calibrated"):
        assert re.search(r"MLPerf Inference v\d[\d./v]* Offline point", acc.efficiency_source)


@pytest.mark.parametrize("key", sorted(MODEL_KEYS))
def test_model_rows_have_source_and_status(key):
    model = CATALOG.model(key)
    assert model.source.strip()
    assert model.status.lower().startswith(STATUS_WORDS)


def test_h100_converted_to_si():
    # ../shared/data/reference/accelerators.csv: 989 TFLOPS, 80 GB, 3.35 TB/s, 450 GB/s/dir.
    h100 = CATALOG.accelerator("h100-sxm")
    assert h100.peak_bf16_flops == pytest.approx(989e12)
    assert h100.memory_bytes == pytest.approx(80e9)
    assert h100.memory_bw_bytes_per_s == pytest.approx(3.35e12)
    assert h100.scaleup_bw_bytes_per_s == pytest.approx(450e9)
    assert h100.rack_power_budget_w == pytest.approx(40_000)


def test_node_overhead_from_dgx_system_power():
    # economics.csv: DGX H100 10,200 W and DGX B200 14,300 W system max, 8 GPUs each.
    assert CATALOG.accelerator("h100-sxm").node_power_w == pytest.approx(10_200)
    assert CATALOG.accelerator("b200").node_power_w == pytest.approx(14_300)


def test_peak_flops_refuses_a_precision_without_a_published_peak():
    h100 = CATALOG.accelerator("h100-sxm")
    assert h100.peak_flops("fp8") == pytest.approx(1979e12)
    assert h100.precisions == ("bf16", "fp8")
    with pytest.raises(UserError, match="'h100-sxm' has no fp4 peak; allowed precisions: bf16, fp8"):
        h100.peak_flops("fp4")
    with pytest.raises(UserError, match="allowed precisions: bf16$"):
        CATALOG.accelerator("tpu-v5e").peak_flops("fp4")
    assert CATALOG.accelerator("b200").peak_flops("fp4") == pytest.approx(9000e12)


def test_unknown_precision_lists_allowed():
    with pytest.raises(UserError, match="fp16.*bf16, fp8, fp4"):
        CATALOG.accelerator("h100-sxm").peak_flops("fp16")


def test_kv_bytes_per_token_match_reference():
    # reference models.csv kv_cache_bytes_per_token_bf16 / _fp8.
    assert CATALOG.model("llama-3-70b").kv_bytes_per_token("bf16") == 327_680
    assert CATALOG.model("llama-3-8b").kv_bytes_per_token("bf16") == 131_072
    assert CATALOG.model("llama-3.1-405b").kv_bytes_per_token("fp8") == 258_048
    assert CATALOG.model("sdxl").kv_bytes_per_token("bf16") == 0


def test_weight_bytes():
    assert CATALOG.model("llama-3-70b").weight_bytes("fp8") == pytest.approx(70.55e9)
    assert CATALOG.model("llama-3-8b").weight_bytes("bf16") == pytest.approx(16.06e9)
    assert BYTES_PER_PARAM.keys() == set(PRECISIONS)


def test_mixtral_experts_add_up():
    mixtral = CATALOG.model("mixtral-8x7b")
    assert mixtral.is_moe and not CATALOG.model("llama-3-70b").is_moe
    active = mixtral.shared_params + mixtral.experts_per_token * mixtral.expert_params
    assert active == pytest.approx(12.88e9, rel=1e-6)
    assert mixtral.expert_params == pytest.approx((46.7e9 - 12.88e9) / 6, rel=1e-6)


@pytest.mark.parametrize("key", ["llada-8b", "sdxl", "flux-1-dev", "wan2.1-t2v-14b",
                                 "wan2.1-t2v-1.3b", "verifier", "clip-l-text",
                                 "openclip-bigg-text", "t5-xxl-encoder", "umt5-xxl-encoder",
                                 "sd-safety-checker"])
def test_activation_bytes_follow_documented_formula(key):
    # c = 46.3: least squares on the HunyuanVideo README peaks (60 GB at 119,056 tokens, 45 GB
    # at 67,576 tokens, hidden 3072, 26 GB DiT weights resident), x = tokens*hidden*2 B
    x = [119056 * 3072 * 2, 67576 * 3072 * 2]
    y = [60e9 - 26e9, 45e9 - 26e9]
    c = round((x[0] * y[0] + x[1] * y[1]) / (x[0] ** 2 + x[1] ** 2), 1)
    model = CATALOG.model(key)
    expected = c * model.latent_tokens * model.hidden * 2
    assert model.activation_bytes_per_sample == pytest.approx(expected, rel=1e-5)
    assert activation_bytes_estimate(model.latent_tokens, model.hidden) == expected


def test_diffusion_defaults():
    assert CATALOG.model("sdxl").default_steps == 20 and CATALOG.model("sdxl").default_cfg
    assert not CATALOG.model("flux-1-dev").default_cfg
    assert CATALOG.model("wan2.1-t2v-14b").flops_per_step == pytest.approx(1.68e15)
    assert CATALOG.model("llada-8b").block_tokens == 256


def test_unknown_key_names_where_and_allowed_keys():
    with pytest.raises(UserError) as err:
        CATALOG.accelerator("H100", where="fleets[0].pools[1] 'chat'")
    message = str(err.value)
    assert message.startswith("fleets[0].pools[1] 'chat': unknown accelerator 'H100'")
    assert "h100-sxm" in message and "b200" in message
    with pytest.raises(UserError, match="unknown model 'gpt-5'.*llama-3-70b"):
        CATALOG.model("gpt-5")


def test_tables_carry_units_and_status():
    acc_table, model_table = CATALOG.accelerators_table(), CATALOG.models_table()
    assert len(acc_table) == len(ACCELERATOR_KEYS) and len(model_table) == len(MODEL_KEYS)
    assert {"peak_bf16_tflops", "memory_gb", "status", "spec_source"} <= set(acc_table.columns)
    assert {"params_b", "kv_bytes_per_token_bf16", "status", "source"} <= set(model_table.columns)


def test_bad_csv_value_names_file_line_and_column(tmp_path):
    from fleets.catalog_io import DATA_DIR
    text = (DATA_DIR / "accelerators.csv").read_text().replace(",989,", ",lots,", 1)
    (tmp_path / "accelerators.csv").write_text(text)
    (tmp_path / "models.csv").write_text((DATA_DIR / "models.csv").read_text())
    with pytest.raises(UserError, match="accelerators.csv line 2 column 'peak_bf16_tflops': not a number"):  # the cell's text is not repeated
        load_catalog(tmp_path)


@pytest.mark.parametrize("key, context", [
    ("llama-3-8b", 8192), ("llama-3-70b", 8192),  # Meta Llama 3 model card: 8k
    ("llama-3.1-8b", 131_072), ("llama-3.1-70b", 131_072), ("llama-3.3-70b", 131_072),  # 128k model cards
])
def test_llama_contexts_follow_the_model_cards(key, context):
    model = CATALOG.model(key)
    assert model.max_context_tokens == context
    assert "MODEL_CARD.md" in model.source
    same = CATALOG.model("llama-3-8b" if "8b" in key else "llama-3-70b")
    assert model.kv_bytes_per_token("bf16") == same.kv_bytes_per_token("bf16")
