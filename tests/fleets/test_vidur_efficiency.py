"""Vidur's H100 profiles give kernel-level efficiencies (GEMMs alone) that bound the
end-to-end values `dcsim validate` fits to MLPerf (a serving run adds attention, norms,
sampling and scheduling on top of the GEMMs), and the NVLink latency."""

import pytest

from data_files import REFERENCE
from fleets.catalog_io import load_catalog
from sim.models.parallelism import FABRICS
from fleets.vidur_efficiency import all_reduce_fit, all_reduce_latency_s, efficiencies, main

VIDUR = REFERENCE / "vidur_profiling"  # shipped (fleets/data/reference/vidur_profiling/NOTICE.md)
MLP_CSV = VIDUR / "compute" / "h100" / "meta-llama" / "Llama-2-70b-hf" / "mlp.csv"
ALL_REDUCE_CSV = VIDUR / "network" / "h100_dgx" / "all_reduce.csv"


def test_kernel_efficiencies_bound_the_end_to_end_fit():
    eta_c, eta_m, details = efficiencies(MLP_CSV)
    assert 0 < eta_c <= 1 and 0 < eta_m <= 1
    h100 = load_catalog().accelerator("h100-sxm")
    assert "MLPerf" in h100.efficiency_source
    assert h100.compute_efficiency <= eta_c and h100.bandwidth_efficiency <= eta_m
    assert details["large_rows"] > 0 and details["small_rows"] > 0


def test_all_reduce_fit_reproduces_the_transferred_fabric():
    """Vidur's H100 NCCL fit is what a fabric without measurements gets
    (sim.models.parallelism.FABRICS['vidur-nccl-h100'], e.g. the TPUs)."""
    fit = all_reduce_fit(ALL_REDUCE_CSV)
    nccl = FABRICS["vidur-nccl-h100"]
    assert fit["alpha0_s"] == pytest.approx(nccl.alpha0_s, abs=0.05e-6)
    assert fit["alpha_log2_s"] == pytest.approx(nccl.alpha_log2_s, abs=0.05e-6)
    assert fit["bus_efficiency"] == pytest.approx(nccl.bus_efficiency, abs=5e-4)
    # the small-message 8-GPU median (a direct read of the raw table) sits near alpha(8)
    alpha8 = nccl.alpha0_s + 3 * nccl.alpha_log2_s
    assert all_reduce_latency_s(ALL_REDUCE_CSV) == pytest.approx(alpha8, rel=0.25)
    assert load_catalog().accelerator("tpu-v6e").scaleup_fabric == "vidur-nccl-h100"


def test_cli_prints_numbers(capsys):
    assert main([str(MLP_CSV)]) == 0
    assert "compute_efficiency 0.688" in capsys.readouterr().out


def test_generation_changes_kernel_efficiency_little():
    """Why the transfer rule has no generation term: Vidur's A100 and H100 GEMM tables of
    the same Llama-2-70B layer give kernel efficiencies within 15 % of each other."""
    from fleets.vidur_efficiency import A100_MEMORY_BW_BYTES_PER_S, A100_PEAK_BF16_FLOPS

    a100_csv = VIDUR / "compute" / "a100" / "meta-llama" / "Llama-2-70b-hf" / "mlp.csv"
    h100 = efficiencies(MLP_CSV)
    a100 = efficiencies(a100_csv, peak_flops=A100_PEAK_BF16_FLOPS, memory_bw_bytes_per_s=A100_MEMORY_BW_BYTES_PER_S)
    assert a100[0] == pytest.approx(h100[0], rel=0.15)
    assert a100[1] == pytest.approx(h100[1], rel=0.15)
