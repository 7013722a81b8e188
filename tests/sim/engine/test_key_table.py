"""KeyTable and BlockIndex (sim/engine/key_table.py) against Python dicts and sets on
generated operations: keys packed into few home buckets (long probe runs, deletions
that shift entries back across the table's end) and enough of them to rehash; a block
index of up to 130 replicas (int64 masks up to 63, Python ints past)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.key_table import BlockIndex, KeyTable

# Keys with one home, the table's last entry at every size: a key's home is its group (the
# multiplicative hash of bits 3-33) times 8 plus its low three bits (KeyTable._home), and
# 2,098,943,527 × 2,654,435,761 ≡ 2**32 − 9 (mod 2**32) has its top 28 bits set, so the last
# group; low bits 7: its last entry. Their probe runs wrap across the table's end.
LAST_GROUP = 2_098_943_527
KEYS = st.one_of(st.integers(0, 40), st.integers(0, 2**28).map(lambda k: (k << 34) | (LAST_GROUP << 3) | 7))


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


def test_the_one_home_keys_start_at_the_last_entry_and_runs_of_eight_share_a_group():
    """The layout _home promises (hand values above): the generated one-home keys start
    at the last entry of a table of 128 and of 2**20 entries, and keys 8m..8m+7 have
    consecutive homes (the group of 8m), so a run of new keys fills whole groups."""
    for buckets in (128, 2**20):
        table = KeyTable()
        table.tmask, table.tshift = buckets - 1, 32 - (buckets.bit_length() - 1)
        for k in (0, 1, 2**28):
            assert table._home((k << 34) | (LAST_GROUP << 3) | 7) == buckets - 1
        for m in (0, 1, 12_345, 2**40):
            homes = [table._home(8 * m + i) for i in range(8)]
            assert homes == [homes[0] + i for i in range(8)] and homes[0] % 8 == 0


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


@settings(max_examples=60)
@given(replicas=st.integers(1, 70), data=st.data())
def test_block_index_runs_across_buckets_growth_and_deletion(replicas, data):
    """Runs of consecutive keys (add_run, remove_run) and single removals over thousands of keys in
    scattered places (so buckets collide, the table grows several times and deletions
    shift probe runs back), against a dict of sets; after every removal of a replica's
    last key of a bucket the bucket may go, and every key must stay found."""
    index, held = BlockIndex(replicas), {}
    starts = st.one_of(st.integers(0, 200), st.integers(0, 2**40), st.integers(2**62 - 2**20, 2**62))
    for _ in range(data.draw(st.integers(1, 40))):
        pos = data.draw(st.integers(0, replicas - 1))
        if data.draw(st.booleans()) or not held:
            start, length = data.draw(starts), data.draw(st.integers(1, 90))
            fresh = [k for k in range(start, start + length) if pos not in held.get(k, set())]
            if len(fresh) == length:  # add_run's contract: none of the run held by the replica
                index.add_run(start, length, pos)
                for k in fresh:
                    held.setdefault(k, set()).add(pos)
        elif data.draw(st.booleans()):
            for key in data.draw(st.lists(st.sampled_from(sorted(held)), max_size=60, unique=True)):
                if held[key]:
                    p = min(held[key])
                    index.remove(key, p)
                    held[key].discard(p)
        else:  # remove_run: the longest stretch from a held key that one replica holds
            start = data.draw(st.sampled_from(sorted(held)))
            if held[start]:
                p, most, length = min(held[start]), data.draw(st.integers(1, 90)), 0
                while length < most and p in held.get(start + length, set()):
                    length += 1
                index.remove_run(start, length, p)
                for k in range(start, start + length):
                    held[k].discard(p)
    for key, reps in held.items():
        assert index.get(key) == sum(2**p for p in reps)
        assert index.get(key + 1) == sum(2**p for p in held.get(key + 1, ()))
    assert len(index) == sum(1 for s in held.values() if s)
