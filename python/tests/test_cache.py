# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""PrefixCache: every named policy, plan contents, plan lifetime, and the token inputs it accepts."""

import array
import gc

import numpy as np
import pytest

import reprise
from conftest import attention_config, hybrid_config

HYBRID_POLICIES = ["memory_only", "snapshot_interval", "snapshot_prefix_tree", "snapshot_turns", "snapshot_all",
                   "strict"]


def make(policy, config=None, **kw):
    config = config or (attention_config() if policy == "block_sharing" else hybrid_config())
    kw.setdefault("kv_blocks", 256)
    kw.setdefault("hasher_seed", 1)
    if policy not in ("block_sharing", "memory_only"):
        kw.setdefault("snapshot_budget_bytes", 8 * config.bytes_per_snapshot)
    if policy in ("snapshot_interval", "snapshot_prefix_tree", "snapshot_all"):
        kw.setdefault("capture_interval", 128)
    return reprise.PrefixCache(config, policy, **kw)


def serve(cache, seq, prompt, captures=True):
    plan = cache.admit(seq, prompt)
    cache.commit(seq, len(prompt), plan.captures[:, 0] if captures else None)
    cache.release(seq)
    cache.step_complete(cache.current_epoch())
    return plan


def test_policies_are_the_documented_set():
    assert set(reprise.POLICIES) == {"block_sharing", "chat", *HYBRID_POLICIES}
    for name, doc in reprise.POLICIES.items():
        assert name in reprise.PrefixCache.__doc__ and doc


@pytest.mark.parametrize("policy", ["block_sharing", *HYBRID_POLICIES])
def test_a_repeated_prompt_hits(policy):
    cache = make(policy)
    assert cache.policy == policy
    prompt = np.arange(300, dtype=np.int32)
    first = serve(cache, 1, prompt)
    assert first.usable_tokens == 0 and first.kv_matched_tokens == 0 and first.restore_slot == -1
    second = cache.admit(2, prompt)
    assert second.kv_matched_tokens == 288  # floor((L - 1) / B) blocks: one token is always computed
    assert second.shared_blocks == 18
    np.testing.assert_array_equal(second.block_table[:18], first.block_table[:18])
    if policy == "block_sharing":
        assert second.usable_tokens == 288 and second.restore_slot == -1
    elif policy == "memory_only":
        assert second.usable_tokens == 0 and second.restore_slot == -1
    else:
        assert second.usable_tokens == 256  # the last aligned snapshot (alignment 64)
        assert 0 <= second.restore_slot < cache.snapshot_slots
        assert second.restore_exactness == "prefill_exact"
        assert second.tokens_lost_to_missing_snapshot == 32
    m = cache.metrics()
    assert m["lookups"] == 2 and m["kv_matched_tokens"] == 288 and m["live_sequences"] == 1
    cache.check_invariants()


def test_share_in_step_shares_blocks_before_their_commit():
    cache = make("block_sharing", share_in_step=True)
    prompt = np.arange(300, dtype=np.int32)
    first = cache.admit(1, prompt)
    second = cache.admit(2, prompt)  # the same step: first has not committed
    assert second.shared_blocks == 18 and second.usable_tokens == 288
    np.testing.assert_array_equal(second.block_table[:18], first.block_table[:18])
    cache.commit(1, 300)  # writers first
    cache.commit(2, 300)
    assert cache.metrics()["blocks_shared_in_step"] == 18
    assert make("block_sharing").admit(1, prompt).shared_blocks == 0  # off by default
    cache.check_invariants()


@pytest.mark.parametrize("policy", ["snapshot_turns", "strict", "snapshot_all"])
def test_captures_follow_the_policy(policy):
    cache = make(policy)
    plan = cache.admit(1, np.arange(600, dtype=np.int32))
    positions = plan.captures[:, 0].tolist()
    assert positions == sorted(positions) and all(0 < p <= 600 and p % 64 == 0 for p in positions)
    assert 576 in positions  # last_aligned: floor(599 / 64) * 64
    if policy == "snapshot_all":
        assert {128, 256, 384, 512} <= set(positions)
    slots = plan.captures[:, 1]
    assert len(set(slots.tolist())) == len(slots) and ((slots >= 0) & (slots < cache.snapshot_slots)).all()


def test_end_of_turn_capture_only_with_end_of_turn():
    for policy, expect in (("snapshot_turns", True), ("strict", False)):
        cache = make(policy)
        plan = cache.admit(1, np.arange(100, dtype=np.int32))
        cache.commit(1, 100, plan.captures[:, 0])
        cache.extend(1, np.arange(28, dtype=np.int32))  # 128 tokens: a full, aligned block end
        cache.commit(1, 128)
        fin = cache.finish(1)
        assert (fin.capture_slot >= 0) == expect
        if expect:
            assert fin.capture_position == 128
        cache.check_invariants()


def test_turn_end_off_a_block_boundary_is_restored_with_a_copy_on_write_plan():
    cache = make("snapshot_turns")
    plan = cache.admit(1, np.arange(100, dtype=np.int32))
    assert plan.copy_src == -1 and plan.copy_dst == -1
    cache.commit(1, 100, plan.captures[:, 0])
    cache.extend(1, np.arange(1000, 1010, dtype=np.int32))
    cache.commit(1, 110)
    fin = cache.finish(1)
    assert fin.capture_position == 110 and fin.capture_slot >= 0  # 110 = 6 blocks + 14 tokens
    assert cache.metrics()["tail_blocks"] == 1
    cache.step_complete(cache.current_epoch())
    turn2 = np.concatenate([np.arange(100), np.arange(1000, 1011), np.arange(5000, 5020)]).astype(np.int32)
    plan = cache.admit(2, turn2)
    assert plan.usable_tokens == 110 and plan.kv_matched_tokens == 110 and plan.shared_blocks == 6
    assert plan.restore_slot == fin.capture_slot and plan.restore_exactness == "decode_continuation"
    assert plan.copy_src >= 0 and plan.copy_dst == plan.block_table[6] and plan.copy_src != plan.copy_dst
    assert cache.metrics()["partial_blocks_copied"] == 1
    cache.check_invariants()


def test_plan_arrays_hold_the_cache_values_and_have_the_right_types():
    cache = make("snapshot_turns", kv_blocks=64)
    plan = cache.admit(7, list(range(100)))
    assert plan.block_table.dtype == np.int32 and plan.block_table.shape == (7,)
    assert plan.captures.dtype == np.int64 and plan.captures.shape[1] == 2
    np.testing.assert_array_equal(plan.block_table, cache.block_table(7))
    assert len(set(plan.block_table.tolist())) == 7 and ((plan.block_table >= 0) & (plan.block_table < 64)).all()
    assert not plan.block_table.flags.writeable and not plan.captures.flags.writeable
    ext = cache.extend(7, [1] * 20)  # 120 tokens: one more block
    assert ext.new_blocks.dtype == np.int32 and ext.first_new_block == 7 and len(ext.new_blocks) == 1
    np.testing.assert_array_equal(cache.block_table(7), np.concatenate([plan.block_table, ext.new_blocks]))


def test_captures_in_the_kernels_form_go_to_the_kernels_and_back_to_commit():
    cache = make("snapshot_turns", kv_blocks=64)
    plan = cache.admit(1, np.arange(200, dtype=np.int32))
    assert len(plan.captures) == 1
    rows = plan.kernel_captures(3)  # the sequence's index in the kernel call's batch
    assert rows.dtype == np.int64 and rows.shape == (1, 3)
    np.testing.assert_array_equal(rows[:, 0], [3])
    np.testing.assert_array_equal(rows[:, 1:], plan.captures)
    np.testing.assert_array_equal(plan.kernel_captures()[:, 0], [0])
    with pytest.raises(reprise.OutOfRange):
        plan.kernel_captures(-1)
    with pytest.raises(reprise.SizeMismatch):
        cache.commit(1, 200, np.zeros((1, 4), dtype=np.int64))
    assert cache.metrics()["snapshot_bytes_held"] == 0  # refused: nothing changed
    cache.commit(1, 200, rows)  # what the kernels were given, as it is
    assert cache.metrics()["snapshot_bytes_held"] == cache.bytes_per_snapshot


def test_commit_takes_a_plans_captures_as_they_are():
    cache = make("snapshot_turns", kv_blocks=64)
    plan = cache.admit(1, np.arange(200, dtype=np.int32))
    cache.commit(1, 200, plan.captures)
    assert cache.metrics()["snapshot_bytes_held"] == cache.bytes_per_snapshot


def test_every_plan_prints_its_fields():
    cache = make("snapshot_turns", kv_blocks=64)
    admit = cache.admit(1, np.arange(100, dtype=np.int32))
    cache.commit(1, 100)
    extend = cache.extend(1, [5] * 20)
    cache.commit(1, 120)
    fork = cache.fork(1, 2)
    finish = cache.finish(1)
    assert repr(admit).startswith("AdmitPlan(")
    assert repr(extend) == "ExtendPlan(new_blocks=1, first_new_block=7, captures=0)"
    assert repr(fork).startswith("ForkPlan(blocks=8, copy_src=") and "copy_recurrent_state=True" in repr(fork)
    assert repr(finish) == f"FinishPlan(capture_position={finish.capture_position}, capture_slot={finish.capture_slot})"
    for plan in (admit, extend, fork, finish):
        assert " object at 0x" not in repr(plan)


def test_a_snapshot_policy_on_a_hybrid_model_asks_for_its_budget():
    config = hybrid_config()
    with pytest.raises(reprise.BudgetTooSmall, match="snapshot_budget_bytes is required") as e:
        reprise.PrefixCache(config, "snapshot_turns", kv_blocks=16)
    assert str(config.bytes_per_snapshot) in str(e.value)
    with pytest.raises(reprise.BudgetTooSmall, match="snapshot_budget_bytes=1 holds none"):
        reprise.PrefixCache(config, "chat", kv_blocks=16, snapshot_budget_bytes=1)
    # Policies without snapshots need no budget.
    reprise.PrefixCache(config, "memory_only", kv_blocks=16)
    reprise.PrefixCache(attention_config(), "block_sharing", kv_blocks=16)
    cache = reprise.PrefixCache(config, "snapshot_turns", kv_blocks=16, snapshot_budget_bytes=config.bytes_per_snapshot)
    assert cache.snapshot_slots == 1


def test_plans_do_not_dangle():
    cache = make("snapshot_turns", kv_blocks=64, max_sequences=4)
    plan = cache.admit(1, np.arange(200, dtype=np.int32))
    table, caps = plan.block_table.copy(), plan.captures.copy()
    view = plan.block_table  # a view kept without the plan
    cache.commit(1, 200, plan.captures[:, 0])
    cache.release(1)
    cache.step_complete(cache.current_epoch())
    # Churn: the released blocks are evicted and handed to other sequences; the cache's internal tables move.
    for s in range(2, 40):
        p = cache.admit(s, np.full(200, s, dtype=np.int32))
        cache.commit(s, 200)
        cache.release(s)
        cache.step_complete(cache.current_epoch())
    assert cache.metrics()["kv_evictions"] > 0
    np.testing.assert_array_equal(plan.block_table, table)
    np.testing.assert_array_equal(plan.captures, caps)
    del plan
    gc.collect()
    np.testing.assert_array_equal(view, table)
    del cache, p
    gc.collect()
    np.testing.assert_array_equal(view, table)  # the array owns its copy: it outlives plan and cache


def test_token_inputs():
    cache = make("block_sharing")
    prompt = list(range(100, 164))
    base = serve(cache, 1, prompt)
    forms = [
        np.array(prompt, dtype=np.int32),  # zero-copy
        np.array(prompt, dtype=np.int64),  # numpy's default integer: range-checked, narrowed
        np.array(prompt, dtype=np.uint16),
        np.array([prompt, prompt], dtype=np.int32).T[:, 1],  # strided: made contiguous
        array.array("i", prompt),  # buffer protocol
        memoryview(array.array("i", prompt)),
        tuple(prompt),
        prompt,
    ]
    for i, tokens in enumerate(forms):
        plan = cache.admit(10 + i, tokens)
        assert plan.kv_matched_tokens == 48, type(tokens)
        np.testing.assert_array_equal(plan.block_table[:3], base.block_table[:3])
        cache.release(10 + i)
    with pytest.raises(TypeError):
        cache.admit(41, np.array([1.0, 2.0]))
    with pytest.raises(OverflowError):
        cache.admit(41, np.array([1, 2**31], dtype=np.int64))
    with pytest.raises(ValueError):
        cache.admit(41, np.zeros((2, 2), dtype=np.int32))
    cache.check_invariants()


def test_extra_keys_separate_prefixes():
    cache = make("block_sharing")
    prompt = np.arange(64, dtype=np.int32)
    serve(cache, 1, prompt)
    assert cache.admit(2, prompt, reprise.ExtraKeys(tenant_salt=5)).kv_matched_tokens == 0
    assert cache.admit(3, prompt).kv_matched_tokens == 48
    digest = bytes(range(32))
    serve(cache, 4, prompt + 1000)
    # A media item at position 0 keys every block (items are positional: test_media_items_are_positional).
    k = reprise.ExtraKeys(lora_id=3, media=[(0, digest)])
    assert k.media == [(0, digest)] and k.lora_id == 3 and k.tenant_salt == 0
    plan = cache.admit(6, prompt + 1000, k)
    cache.commit(6, 64)
    cache.release(6)
    assert plan.kv_matched_tokens == 0
    assert cache.admit(7, prompt + 1000, reprise.ExtraKeys(lora_id=3, media=[(0, digest)])).kv_matched_tokens == 48


def test_media_items_are_positional():
    """A text request and an image request over one system prompt share its blocks up to the image's block."""
    cache = make("block_sharing")
    prompt = np.arange(104, dtype=np.int32)  # a 64-token system prompt (blocks 0-3), then the user's turn
    cat, dog = b"cat-digest", b"dog-digest"

    def shared(seq, keys=None):
        plan = cache.admit(seq, prompt, keys)
        cache.commit(seq, len(prompt))
        cache.release(seq)
        return plan.kv_matched_tokens

    assert shared(1) == 0  # the text request
    assert shared(2, reprise.ExtraKeys(media=[(70, cat)])) == 64  # the image's placeholders start in block 4
    assert shared(3, reprise.ExtraKeys(media=[(70, cat)])) == 96  # the same image at the same position
    assert shared(4, reprise.ExtraKeys(media=[(70, dog)])) == 64  # another image there
    assert shared(5, reprise.ExtraKeys(media=[(75, cat)])) == 64  # the same image elsewhere in the block
    assert shared(6, reprise.ExtraKeys(media=[(90, cat)])) == 80  # a block later: block 4 is the text's
    assert shared(7, reprise.ExtraKeys(media=[(70, cat), (90, dog)])) == 80
    assert shared(8) == 96
    cache.check_invariants()


def test_media_items_snapshots_are_positional():
    """A hybrid's snapshot before the image is restored by a text request; past it only with the same image."""
    cache = make("snapshot_interval", capture_interval=64,
                 snapshot_budget_bytes=16 * hybrid_config().bytes_per_snapshot)  # captures at 64, 128, 192
    prompt = np.arange(200, dtype=np.int32)

    def usable(seq, keys=None):
        plan = cache.admit(seq, prompt, keys)
        cache.commit(seq, len(prompt), plan.captures[:, 0])
        cache.release(seq)
        cache.step_complete(cache.current_epoch())
        return plan.usable_tokens

    image = reprise.ExtraKeys(media=[(100, b"img")])
    assert usable(1, image) == 0
    assert usable(2) == 64  # a text request restores the image request's snapshot before the image
    assert usable(3, image) == 192  # the same image at the same position restores past it
    assert usable(4, reprise.ExtraKeys(media=[(100, b"other")])) == 64
    cache.check_invariants()


def test_extra_keys_media_types_are_checked():
    with pytest.raises(TypeError):
        reprise.ExtraKeys(media=[(1,)])
    with pytest.raises(TypeError):
        reprise.ExtraKeys(media=[(1, "not bytes")])
    with pytest.raises(TypeError):
        reprise.ExtraKeys(media=[("1", b"d")])
    with pytest.raises(ValueError):
        reprise.ExtraKeys(media=[(-1, b"d")])
    with pytest.raises(TypeError):
        reprise.ExtraKeys(multimodal_digest=b"d")  # the root-level digest is gone: media are positional
    assert reprise.ExtraKeys(media=()).media == []


def test_fork_copies_the_partial_block():
    cache = make("snapshot_turns")
    plan = cache.admit(1, np.arange(40, dtype=np.int32))
    cache.commit(1, 40)
    fork = cache.fork(1, 2)
    assert fork.block_table.dtype == np.int32 and len(fork.block_table) == 3
    np.testing.assert_array_equal(fork.block_table[:2], plan.block_table[:2])
    assert fork.copy_src == plan.block_table[2] and fork.copy_dst == fork.block_table[2] != fork.copy_src
    assert fork.copy_recurrent_state
    cache.check_invariants()


def test_step_complete_and_epochs():
    cache = make("memory_only")
    assert cache.current_epoch() == 0
    cache.step_complete(0)
    assert cache.current_epoch() == 1
    cache.step_complete(10)
    assert cache.current_epoch() == 11
    cache.step_complete(3)  # an old step: nothing changes
    assert cache.current_epoch() == 11


def test_geometry_and_metrics_keys():
    cache = make("snapshot_restore")
    config = hybrid_config()
    assert cache.block_size == 16 and cache.alignment == 64 and cache.kv_blocks == 256
    assert cache.bytes_per_snapshot == config.bytes_per_snapshot and cache.snapshot_slots == 8
    assert cache.hasher_seed == 1 and cache.host_kv_units == 0 and cache.host_snapshot_units == 0
    m = cache.metrics()
    assert len(m) == 49 and all(v == 0 for k, v in m.items() if k != "blocks_free")  # 11 host, 11 remote tier
    assert m["blocks_free"] == 256
    assert repr(cache).startswith("PrefixCache(policy='snapshot_restore', kv_blocks=256")
    assert repr(cache.admit(1, range(40))) == (
        "AdmitPlan(blocks=3, shared_blocks=0, kv_matched_tokens=0, usable_tokens=0, restore_slot=-1, captures=0)")
    cache.release(1)


def test_chat_restores_turn_ends_branch_blocks_and_decode_checkpoints():
    cache = make("chat", decode_checkpoint_interval=64)
    system = np.arange(1, 91, dtype=np.int32)  # 5 full blocks + 10 tokens (B = 16, alignment 64)
    # Conversation 1: prompt, 80 decode steps one token each; checkpoints at 128 and 192.
    tokens = np.concatenate([system, np.arange(5000, 5030, dtype=np.int32)])
    plan = cache.admit(1, tokens)
    cache.commit(1, len(tokens), plan.captures[:, 0])
    cache.step_complete(cache.current_epoch())
    checkpoints = []
    for t in range(7000, 7080):
        ext = cache.extend(1, [t])
        assert ext.captures.shape[1] == 2
        tokens = np.append(tokens, np.int32(t))
        checkpoints += list(ext.captures[:, 0])
        cache.commit(1, len(tokens), ext.captures[:, 0])
        cache.step_complete(cache.current_epoch())
    assert checkpoints == [128, 192]
    end = cache.finish(1)
    assert end.capture_position == 200 and end.capture_slot >= 0  # 120 prompt + 80 fed
    cache.step_complete(cache.current_epoch())

    # Turn 2 restores exactly the turn end, copying the kept partial block.
    turn2 = cache.admit(2, np.concatenate([tokens, np.arange(9000, 9005, dtype=np.int32)]))
    assert turn2.usable_tokens == 200 and turn2.restore_exactness == "decode_continuation"
    assert turn2.copy_src >= 0 and turn2.copy_dst == turn2.block_table[turn2.shared_blocks]
    cache.release(2)
    cache.step_complete(cache.current_epoch())

    # A prompt that departs from the reply at 170 restores the checkpoint at 128.
    edited = cache.admit(3, np.concatenate([tokens[:170], np.arange(9100, 9110, dtype=np.int32)]))
    assert edited.usable_tokens == 128
    cache.release(3)
    cache.step_complete(cache.current_epoch())

    # A second conversation behind the same system prompt captures the branch block at 80 (off the grid).
    other = cache.admit(4, np.concatenate([system, np.arange(6000, 6020, dtype=np.int32)]))
    assert other.kv_matched_tokens == 80 and list(other.captures[:, 0]) == [80]
    assert other.restore_exactness == "decode_continuation"
    cache.commit(4, 110, other.captures[:, 0])
    cache.release(4)
    cache.step_complete(cache.current_epoch())
    third = cache.admit(5, np.concatenate([system, np.arange(6100, 6120, dtype=np.int32)]))
    assert third.usable_tokens == 80 and third.restore_slot == other.captures[0, 1]
    cache.check_invariants()


def test_chat_capture_offsets_serve_a_system_prompts_second_conversation_at_its_first_meeting():
    system = np.arange(1, 91, dtype=np.int32)  # ends at 90: 80 on the block grid (B = 16, alignment 64)
    end = len(system) // 16 * 16

    def second_conversation(cache, offsets):
        first = np.concatenate([system, np.arange(5000, 5030, dtype=np.int32)])
        plan = cache.admit(1, first, capture_offsets=offsets)
        cache.commit(1, len(first), plan.captures[:, 0])
        cache.release(1)
        cache.step_complete(cache.current_epoch())
        return cache.admit(2, np.concatenate([system, np.arange(6000, 6020, dtype=np.int32)]))

    # Without the offset the second conversation recomputes the system prompt; with it, it restores at 80.
    assert second_conversation(make("chat"), None).usable_tokens == 0
    second = second_conversation(make("chat"), [end])
    assert second.usable_tokens == end and second.restore_exactness == "decode_continuation"

    # Bad offsets are refused and change nothing; a policy that reads none refuses them.
    cache = make("chat")
    before = cache.metrics()
    with pytest.raises(reprise.Misaligned):
        cache.admit(1, system, capture_offsets=[len(system)])
    with pytest.raises(reprise.OutOfRange):
        cache.admit(1, system, capture_offsets=[96])
    with pytest.raises(reprise.InvalidArgument):
        make("strict").admit(1, system, capture_offsets=[64])
    assert cache.metrics() == before
    cache.check_invariants()


def test_chat_rejects_bad_checkpoint_options():
    config = hybrid_config()
    budget = 4 * config.bytes_per_snapshot
    with pytest.raises(reprise.Misaligned):
        reprise.PrefixCache(config, "chat", kv_blocks=64, snapshot_budget_bytes=budget, decode_checkpoint_interval=96)
    with pytest.raises(reprise.InvalidArgument):
        reprise.PrefixCache(config, "chat", kv_blocks=64, snapshot_budget_bytes=budget, decode_checkpoint_interval=64,
                            decode_checkpoints_per_sequence=0)


def test_finish_last_turn_captures_nothing():
    cache = make("chat")
    tokens = np.arange(1, 41, dtype=np.int32)
    cache.admit(1, tokens)
    cache.commit(1, 40)
    cache.step_complete(cache.current_epoch())
    assert cache.finish(1, last_turn=True).capture_slot == -1
    assert cache.metrics()["snapshots_held"] == 0


def chat_turn(cache, seq, prompt, reply):
    """One request as an engine runs it: admit; commit before each prompt piece (ending at each capture) and
    each fed token with the captures due there; extend each fed token; step_complete after each step;
    finish. Returns (usable tokens, finish capture position, finish capture slot)."""
    plan = cache.admit(seq, np.array(prompt, np.int32))
    pieces = [int(p) for p in plan.captures[:, 0] if plan.usable_tokens < p < len(prompt)]
    for p in pieces:  # a capture off the grid ends a prefill piece
        cache.commit(seq, p, [p])
    cache.commit(seq, len(prompt), [p for p in plan.captures[:, 0] if p == len(prompt)])
    cache.step_complete(cache.current_epoch())
    n = len(prompt)
    for t in reply[:-1]:  # the last sampled token is never fed
        ext = cache.extend(seq, [t])
        n += 1
        cache.commit(seq, n, ext.captures[:, 0])
        cache.step_complete(cache.current_epoch())
    end = cache.finish(seq, last_turn=False)
    cache.step_complete(cache.current_epoch())
    return plan.usable_tokens, end.capture_position, end.capture_slot


@pytest.mark.parametrize("repeated", [False, True])
def test_chat_keeps_a_conversations_turn_ends_when_another_repeats_its_opening(repeated):
    # Conversation A: a 118-token prompt P, a 10-token reply R (turn end at 127, the partial block [96, 127)
    # kept with it). Conversation B: the same P, a 48-token reply beginning with R (greedy decoding of the same
    # prompt), so its decode-filled block [96, 128) holds exactly the tokens of A's next prompts there. A's
    # next turns restore at their own turn ends and capture new ones whether or not B ran.
    config = reprise.ModelConfig([(reprise.KvShape(2, 128, 32, "f16"), 1),
                                  (reprise.Mamba2Shape(2, 256, 128, 2, 4, 64, "f32", "f32"), 1)])
    cache = reprise.PrefixCache(config, "chat", kv_blocks=256, max_sequences=4, snapshot_budget_bytes=64 << 20)
    rng = np.random.default_rng(7)
    prompt, reply = list(rng.integers(1, 30000, 118)), list(rng.integers(1, 30000, 10))
    assert chat_turn(cache, 1, prompt, reply)[1] == 127
    if repeated:
        usable, position, slot = chat_turn(cache, 2, prompt, reply + list(rng.integers(1, 30000, 38)))
        assert (usable, position) == (0, 165) and slot >= 0  # it captured the branch block at 96 on the way
    history = prompt + reply
    restored, captured = [], []
    for seq, (message, length) in enumerate(zip((20, 10, 8, 5), (26, 15, 7, 15)), start=3):
        history += list(rng.integers(1, 30000, message))
        answer = list(rng.integers(1, 30000, length))
        usable, position, slot = chat_turn(cache, seq, history, answer)
        history += answer
        restored.append(usable)
        captured.append(position if slot >= 0 else 0)
    assert restored == [127, 173, 198, 213]
    assert captured == [173, 198, 213, 233]


def test_cost_aware_eviction_keeps_the_snapshot_that_saves_more_prefill_where_lru_evicts_it():
    deep, shallow = np.arange(1, 1101, dtype=np.int32), np.arange(100000, 100200, dtype=np.int32)

    def restored_after_a_third_capture(**kw):
        # Two slots: a deep snapshot (1024, published first: LRU's victim) and a shallow one (64), then a third.
        cache = make("chat", snapshot_budget_bytes=2 * hybrid_config().bytes_per_snapshot, **kw)
        for seq, prompt, at in ((1, deep, 1024), (2, shallow, 64)):
            plan = cache.admit(seq, prompt, capture_offsets=[at])
            cache.commit(seq, len(prompt), plan.captures[:, 0])
            cache.release(seq)
        cache.step_complete(cache.current_epoch())
        third = np.arange(200000, 200300, dtype=np.int32)
        plan = cache.admit(3, third, capture_offsets=[256])
        cache.commit(3, len(third), plan.captures[:, 0])
        cache.release(3)
        cache.step_complete(cache.current_epoch())
        usable = []
        for seq, prompt in ((4, deep), (5, shallow)):
            usable.append(cache.admit(seq, prompt).usable_tokens)
            cache.release(seq)
        cache.check_invariants()
        assert cache.metrics()["snapshot_evictions_capacity"] == 1
        return usable

    assert restored_after_a_third_capture() == [0, 64]
    assert restored_after_a_third_capture(snapshot_eviction="lru") == [0, 64]
    assert restored_after_a_third_capture(snapshot_eviction="cost_aware") == [1024, 0]
    assert restored_after_a_third_capture(snapshot_eviction="cost_aware", eviction_window=1) == [0, 64]
    with pytest.raises(ValueError, match="snapshot_eviction 'marconi'"):
        make("chat", snapshot_eviction="marconi")
