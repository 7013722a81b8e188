"""Pipeline stages of image/video diffusion: encoder / VAE / safety rows and their links."""

import pytest

from fleets.catalog import MODEL_KINDS, PIPELINE_KINDS, STATUS_WORDS

from fleets.catalog_io import load_catalog
from fleets.catalog_io import DATA_DIR
from sim.errors import UserError

CATALOG = load_catalog()
DENOISERS = ["sdxl", "flux-1-dev", "wan2.1-t2v-14b", "wan2.1-t2v-1.3b", "wan2.2-t2v-a14b"]
STAGE_ROWS = ["clip-l-text", "openclip-bigg-text", "t5-xxl-encoder", "umt5-xxl-encoder",
              "sdxl-vae-decoder", "flux-vae-decoder", "wan-vae-decoder", "sd-safety-checker"]


def test_new_kinds_added_and_verifier_kept():
    assert {"text_encoder", "vae_decoder", "safety_checker", "verifier"} <= set(MODEL_KINDS)


def test_every_pipeline_model_is_a_listed_denoiser():
    assert sorted(k for k, m in CATALOG.models.items() if m.kind in PIPELINE_KINDS) == \
        sorted(DENOISERS)


@pytest.mark.parametrize("key", DENOISERS)
def test_denoiser_references_existing_stages_of_the_right_kind(key):
    encoders, vae, safety = CATALOG.pipeline(key)
    assert encoders and all(CATALOG.model(k).kind == "text_encoder" for k in encoders)
    assert CATALOG.model(vae).kind == "vae_decoder"
    if CATALOG.model(key).kind == "image_diffusion":
        assert CATALOG.model(safety).kind == "safety_checker"
    else:
        assert safety == ""


def test_expected_pipelines():
    assert CATALOG.pipeline("sdxl") == (("clip-l-text", "openclip-bigg-text"),
                                        "sdxl-vae-decoder", "sd-safety-checker")
    assert CATALOG.pipeline("flux-1-dev")[0] == ("clip-l-text", "t5-xxl-encoder")
    assert CATALOG.pipeline("wan2.1-t2v-14b") == (("umt5-xxl-encoder",), "wan-vae-decoder", "")
    assert CATALOG.pipeline("llama-3-70b") == ((), "", "")


@pytest.mark.parametrize("key", STAGE_ROWS)
def test_stage_rows_have_source_status_and_per_call_numbers(key):
    model = CATALOG.model(key)
    assert model.source.strip() and model.assumptions.strip()
    assert model.status.lower().startswith(STATUS_WORDS)
    assert model.params > 0 and model.flops_per_step > 0 and model.latent_tokens > 0
    assert model.activation_bytes_per_sample > 0 and model.hidden


@pytest.mark.parametrize("key", DENOISERS + ["sdxl-vae-decoder", "flux-vae-decoder",
                                             "wan-vae-decoder"])
def test_attention_fraction_in_unit_interval(key):
    assert 0 <= CATALOG.model(key).attention_flops_fraction < 1


@pytest.mark.parametrize("key", DENOISERS)
def test_reference_shape_set(key):
    model = CATALOG.model(key)
    assert model.ref_height_px > 0 and model.ref_width_px > 0
    assert model.ref_frames == (1 if model.kind == "image_diffusion" else 81)


def test_latent_bytes_recomputed_from_dimensions():
    bf16 = 2
    assert CATALOG.model("sdxl").latent_bytes_per_sample == (1024 // 8) ** 2 * 4 * bf16
    assert CATALOG.model("flux-1-dev").latent_bytes_per_sample == (1024 // 8) ** 2 * 16 * bf16
    frames = 1 + (81 - 1) // 4  # Wan vae_stride (4, 8, 8), z_dim 16
    wan = frames * (480 // 8) * (832 // 8) * 16 * bf16
    assert wan == 4_193_280
    for key in ("wan2.1-t2v-14b", "wan2.1-t2v-1.3b"):
        assert CATALOG.model(key).latent_bytes_per_sample == wan


def _encoder_flops(tokens, d, layers, ff, gated):
    """Documented formula: 2 N L (4 d^2 + {2|3} d ff) + 4 L N^2 d."""
    return 2 * tokens * layers * (4 * d * d + (3 if gated else 2) * d * ff) \
        + 4 * layers * tokens ** 2 * d


def test_t5_xxl_flops_recomputed():
    t5 = CATALOG.model("t5-xxl-encoder")
    expected = _encoder_flops(512, 4096, 24, 10240, gated=True)
    assert t5.flops_per_step == pytest.approx(expected, rel=1e-5)
    # ~= 2 x params x 512 (embedding table excluded) + attention term
    assert t5.flops_per_step == pytest.approx(2 * 4.631e9 * 512 + 4 * 24 * 512 ** 2 * 4096,
                                              rel=1e-3)
    assert CATALOG.model("umt5-xxl-encoder").flops_per_step == pytest.approx(expected, rel=1e-5)


def test_clip_text_flops_recomputed():
    assert CATALOG.model("clip-l-text").flops_per_step == pytest.approx(
        _encoder_flops(77, 768, 12, 3072, gated=False), rel=1e-5)
    assert CATALOG.model("openclip-bigg-text").flops_per_step == pytest.approx(
        _encoder_flops(77, 1280, 32, 5120, gated=False), rel=1e-5)


def test_umt5_params_from_config():
    layers = 24 * (4 * 4096 ** 2 + 3 * 4096 * 10240)
    assert CATALOG.model("umt5-xxl-encoder").params == pytest.approx(
        layers + 256384 * 4096, rel=1e-3)
    assert CATALOG.model("t5-xxl-encoder").params == pytest.approx(layers + 32128 * 4096,
                                                                   rel=1e-3)


def test_flux_attention_fraction_from_reference_breakdown():
    d, n, blocks = 3072, 4608, 57
    linear, attention = blocks * 2 * 12 * d * d * n, blocks * 4 * n * n * d
    flux = CATALOG.model("flux-1-dev")
    assert flux.attention_flops_fraction == pytest.approx(attention / (linear + attention),
                                                          abs=1e-3)
    assert flux.flops_per_step == pytest.approx(linear + attention, rel=1e-3)


def test_scaling_rule_reproduces_reference_720p():
    # reference models.csv: Wan2.1-T2V-14B at 720P (75,600 tokens) = 6.52 PFLOP.
    wan = CATALOG.model("wan2.1-t2v-14b")
    assert wan.flops_per_step_at(wan.latent_tokens) == pytest.approx(wan.flops_per_step)
    assert wan.flops_per_step_at(75_600) == pytest.approx(6.52e15, rel=0.01)
    # SDXL at 512x512: reference 1.59 TFLOP; the two-term rule is within 3%.
    assert CATALOG.model("sdxl").flops_per_step_at(64 * 64) == pytest.approx(1.59e12, rel=0.03)


def test_scaling_needs_flops_and_tokens():
    with pytest.raises(UserError, match="llama-3-70b"):
        CATALOG.model("llama-3-70b").flops_per_step_at(100)


def _write_catalog(tmp_path, edit):
    text = edit((DATA_DIR / "models.csv").read_text())
    (tmp_path / "models.csv").write_text(text)
    (tmp_path / "accelerators.csv").write_text((DATA_DIR / "accelerators.csv").read_text())
    return tmp_path


def test_missing_reference_names_row_and_key(tmp_path):
    path = _write_catalog(tmp_path, lambda t: t.replace("clip-l-text+openclip-bigg-text",
                                                        "clip-l-text+no-such-encoder", 1))
    with pytest.raises(UserError, match="model 'sdxl' column 'text_encoders'.*'no-such-encoder'"):
        load_catalog(path)


def test_wrong_kind_reference_rejected(tmp_path):
    path = _write_catalog(tmp_path, lambda t: t.replace(",wan-vae-decoder,", ",clip-l-text,", 1))
    with pytest.raises(UserError, match="vae_decoder.*'clip-l-text'.*text_encoder"):
        load_catalog(path)


def test_bad_attention_fraction_rejected(tmp_path):
    path = _write_catalog(tmp_path, lambda t: t.replace(",0.5239", ",1.5", 1))
    with pytest.raises(UserError, match="attention_flops_fraction"):
        load_catalog(path)
