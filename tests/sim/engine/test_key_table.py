"""KeyTable and BlockIndex (sim/engine/key_table.py) against Python dicts and sets on
generated operations: keys packed into few home buckets (long probe runs, deletions
that shift entries back across the table's end) and enough of them to rehash; a block
index of up to 130 replicas (int64 masks up to 63, Python ints past)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.key_table import BlockIndex, KeyTable

KEYS = st.one_of(st.integers(0, 40), st.integers(0, 2**31).map(lambda k: (k << 31) | 5))  # the latter: one home


@settings(max_examples=150)
@given(bulk=st.integers(0, 300), ops=st.lists(st.tuples(st.sampled_from(["put", "erase"]), KEYS, st.integers(-5, 2**40)),
                                                max_size=400))
def test_key_table_is_a_dict(bulk, ops):
    table, want = KeyTable(), {}
    for key in range(1000, 1000 + bulk):  # past 64 keys the table rehashes (128 buckets at most half full)
        ops.insert(len(ops) // 2, ("put", key, key))
    for op, key, value in ops:
        if op == "put":
            table.put(key, value)
            want[key] = value
        elif key in want:
            table.erase(key)
            del want[key]
        assert len(table) == len(want)
    for key, value in want.items():
        assert table.get(key, -7) == value
    for key in [*range(41), *range(1000, 1301)]:
        assert table.get(key, -7) == want.get(key, -7)


@settings(max_examples=100)
@given(replicas=st.integers(1, 130), data=st.data())
def test_block_index_holds_the_replicas_of_each_key(replicas, data):
    index, held = BlockIndex(replicas), {}
    for _ in range(data.draw(st.integers(0, 120))):
        key, pos = data.draw(st.integers(0, 30)), data.draw(st.integers(0, replicas - 1))
        if pos in held.get(key, set()):
            index.remove(key, pos)
            held[key].discard(pos)
        else:
            index.add(key, pos)
            held.setdefault(key, set()).add(pos)
    for key in range(31):
        assert index.get(key) == sum(2**p for p in held.get(key, ()))
    assert len(index) == sum(1 for s in held.values() if s)
