"""The speculative-decoding gain table of docs/serving.md: engine runs of bursts of b
requests that arrive together and decode together, decode tokens/s per sequence without
and with speculation (the same set-up as tests/sim/engine/test_speculative_decoding.py).

    .venv/bin/python bench/spec_gain_table.py      # ~1 min; prints the markdown rows
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "tests"))  # after the repository: tests/sim would shadow sim/

from scenario_cases import make_scenario  # noqa: E402

from sim.engine.core import simulate  # noqa: E402

MTP = {"method": "mtp", "draft_tokens": 1, "acceptance": 0.875, "head_vocab": 129_280}
EAGLE = {"method": "eagle", "draft_tokens": 3, "acceptance": 0.7, "head_vocab": 128_256}
ROWS = [
    ("DeepSeek-V3, GB200 EP64, MTP k=1, α=0.875", "deepseek-v3", {"accelerator": "gb200", "tp": 1, "ep": 64,
                                                                    "precision": "fp8"}, MTP, 1000, 201),
    ("DeepSeek-V3, 8× H200 TP8, same MTP", "deepseek-v3", {"accelerator": "h200", "tp": 8, "precision": "fp8"},
     MTP, 1000, 201),
    ("Llama-3.1-70B, 4× H100 TP4, EAGLE k=3, α=0.7", "llama-3.1-70b", {"accelerator": "h100-sxm", "tp": 4},
     EAGLE, 200, 2001),
]


def burst(folder: Path, batch: int, bursts: int, prompt: int, output: int) -> dict:
    path = folder / f"burst{batch}x{bursts}.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:{(200 * i) // 60:02d}:{(200 * i) % 60:02d}.0000000,{prompt},{output}\n"
        for i in range(bursts) for _ in range(batch)))
    return {"kind": "trace", "path": str(path), "format": "azure_csv"}


def speed(folder: Path, model: str, pool: dict, spec: dict | None, batch: int, prompt: int, output: int) -> float:
    bursts = 8 if batch == 1 else 1
    wl = {"kind": "autoregressive", "model": model, "arrival": burst(folder, batch, bursts, prompt, output),
          "prompt_tokens": {"kind": "constant", "value": prompt}, "output_tokens": {"kind": "constant", "value": output}}
    if spec:
        wl["speculation"] = spec
    pool = {**pool, "name": "p", "serves": ["w"], "replicas": 1, "max_batch": 256, "max_prefill_tokens": 300_000}
    rows = simulate(make_scenario({"w": wl}, [pool], duration_s=1600.0, drain_s=3000.0)).requests
    assert (rows["status"] == "completed").all() and len(rows) == batch * bursts
    return float(((rows["output_tokens"] - 1) / (rows["done_at_s"] - rows["first_token_at_s"])).mean())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, model, pool, spec, prompt, output in ROWS:
            cells = []
            for batch in (1, 32, 256):
                off, on = (speed(folder, model, pool, s, batch, prompt, output) for s in (None, spec))
                cells.append(f"{off:.0f} → {on:.0f} ({on / off:.2f}×)")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
