"""Prefix block keys of requests: the chain of block hashes a prefix cache looks up
(:mod:`sim.engine.prefix_cache`).

A trace such as Mooncake's gives each request one hash per block of its prompt
(``hash_ids``, 512-token blocks, the last one partial: :data:`MOONCAKE_BLOCK_TOKENS`). A cache must match whole prefixes, not single blocks, so
block i is keyed by the chain (key of block i-1, hash of block i), interned as a small
integer: two requests share key i exactly when their hashes 0..i are equal.
"""

from __future__ import annotations

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in the Mooncake traces: NVIDIA Dynamo's trace tools
(github.com/ai-dynamo/dynamo, benchmarks/data_generator/README.md, "Block Size and Hash
IDs": the block size "is assumed to be 512"; secondary), and the shipped file agrees:
each of its 12,031 rows has ceil(input_length / 512) ids (checked 2026-11-26; derived)."""


def chain_keys(block_hashes, table: dict) -> tuple:
    """Chain keys of one request's blocks (module docstring), interned in ``table``
    (``{(parent key, hash): key}``, parent -1 for block 0, shared by every request of a
    source and updated in place) as consecutive integers from 0 in first-seen order, so
    the keys are deterministic.

    Args:
        block_hashes: the per-block hashes (ints), block 0 first.
    Returns:
        tuple of int, one key per block.
    """
    keys = []
    parent = -1
    for h in block_hashes:
        pair = (parent, h)
        key = table.get(pair)
        if key is None:
            key = table[pair] = len(table)
        keys.append(key)
        parent = key
    return tuple(keys)
