"""A synthetic trace of multi-turn chat sessions, written in the Mooncake JSONL format
(``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks),
so a scenario replays it like the Mooncake trace and a prefix cache sees its reuse
(docs/kv-reuse.md).

The model (each parameter's source is in :class:`SessionParams`):

- sessions start as a Poisson process of ``sessions_per_s``;
- a session has a geometric number of turns (mean ``turns_mean``);
- a session's tokens are one append-only stream: a system prompt (one of
  ``system_prompts``, shared by every session that draws it), then per turn the user's new
  tokens and the model's output. Turn k's prompt is the stream up to its new user tokens
  (history + new tokens), its output the next ``output`` tokens;
- turn k+1 arrives ``think`` seconds (exponential, mean ``think_time_s``) after turn k
  arrives (an open-loop trace: it does not wait for turn k's answer, which the trace
  cannot know);
- block i of a prompt (tokens [512 i, 512 (i+1))) is hashed by its place in the stream: a
  block inside the system prompt by (system prompt, i), a later whole block by
  (session, i), and a prompt's last partial block gets an id of its own, as in the
  Mooncake traces (every row has ceil(input_length / 512) ids).

Run ``python -m traffic.sessions OUT.jsonl [--sessions-per-s R] [--duration-s D] [--seed S]``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import numpy as np

from traffic.distributions import AZURE_CONV_OUTPUT_LOGNORMAL, AZURE_CONV_PROMPT_LOGNORMAL, sample_tokens
from traffic.prefix import MOONCAKE_BLOCK_TOKENS

BLOCK = MOONCAKE_BLOCK_TOKENS


@dataclass(frozen=True)
class SessionParams:
    """Parameters of :func:`generate_sessions`.

    - ``turns_mean`` 3.51: ShareGPT's user turns per conversation (94,145 conversations,
      330,239 turns; Yan et al., "ShareChat", arXiv 2512.17843, Table 1; secondary).
    - ``user_tokens`` and ``output_tokens`` per turn: the Azure LLM inference trace 2023
      (conv) lognormal fits of prompt and output lengths (traffic.distributions; derived),
      used for one turn's new input and its answer (an assumption: the Azure rows are whole
      requests, history included where the client sent it).
    - ``think_time_s`` 60 s, ``system_prompts`` 4 of ``system_prompt_tokens`` 1,024: assumed
      (no published distribution found; docs/kv-reuse.md says how they move the hit ratio).
    """

    sessions_per_s: float = 0.5
    duration_s: float = 3600.0
    turns_mean: float = 3.51
    think_time_s: float = 60.0
    system_prompts: int = 4
    system_prompt_tokens: int = 1024

    def __post_init__(self) -> None:
        if not (self.sessions_per_s > 0 and self.duration_s > 0 and self.turns_mean >= 1
                and self.think_time_s >= 0 and self.system_prompts >= 1 and self.system_prompt_tokens >= 0):
            raise ValueError(f"session parameters out of range: {self}")


def generate_sessions(params: SessionParams, seed: int) -> list[dict]:
    """Rows of the trace (module docstring), sorted by timestamp (ms, ints), turns of a
    session in order; each row also carries ``session`` and ``turn`` (ignored by the
    Mooncake reader). Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(params.sessions_per_s * params.duration_s))
    starts = np.sort(rng.uniform(0.0, params.duration_s, n))
    turns = rng.geometric(1.0 / params.turns_mean, n)
    systems = rng.integers(0, params.system_prompts, n)
    rows: list[dict] = []
    unique = [0]  # ids of partial blocks, after the stream blocks' ids (interned below)
    ids: dict = {}
    for s in range(n):
        k = int(turns[s])
        users = sample_tokens(AZURE_CONV_PROMPT_LOGNORMAL, rng, k)
        outputs = sample_tokens(AZURE_CONV_OUTPUT_LOGNORMAL, rng, k)
        gaps = rng.exponential(params.think_time_s, k - 1) if params.think_time_s > 0 else np.zeros(k - 1)
        t = starts[s] + np.concatenate(([0.0], np.cumsum(gaps)))
        history = params.system_prompt_tokens
        for j in range(k):
            prompt = history + int(users[j])
            rows.append({"timestamp": int(t[j] * 1000), "input_length": prompt, "output_length": int(outputs[j]),
                         "hash_ids": _hashes(prompt, params.system_prompt_tokens, int(systems[s]), s, ids, unique),
                         "session": s, "turn": j})
            history = prompt + int(outputs[j])
    rows.sort(key=lambda r: r["timestamp"])  # stable: a session's turns keep their order
    return rows


def _hashes(prompt: int, system_tokens: int, system: int, session: int, ids: dict, unique: list) -> list[int]:
    """ceil(prompt / 512) block ids: whole blocks by their place in the stream, inside
    the system prompt shared, the last partial block unique."""
    out = []
    for i in range(-(-prompt // BLOCK)):
        end = (i + 1) * BLOCK
        if end > prompt:
            key = ("partial", unique[0])
            unique[0] += 1
        elif end <= system_tokens:
            key = ("system", system, i)
        else:
            key = ("session", session, i)
        out.append(ids.setdefault(key, len(ids)))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Write a synthetic multi-turn session trace (Mooncake JSONL).")
    ap.add_argument("out")
    ap.add_argument("--sessions-per-s", type=float, default=SessionParams.sessions_per_s)
    ap.add_argument("--duration-s", type=float, default=SessionParams.duration_s)
    ap.add_argument("--think-time-s", type=float, default=SessionParams.think_time_s)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    params = SessionParams(args.sessions_per_s, args.duration_s, think_time_s=args.think_time_s)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in generate_sessions(params, args.seed):
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
