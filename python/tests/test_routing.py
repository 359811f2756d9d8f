# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Routing a fleet by state from Python: caches built with state_events report what they hold, a StateRouter
sends each turn of a conversation (no session id anywhere) to the engine that holds the previous turn's state,
under a load cap. Lost, duplicated or misdelivered events cost at most a miss: the chosen engine's own cache
verifies every hit. Every error leaves the router as it was."""

import gc
import math
import pickle

import numpy as np
import pytest

import reprise
from conftest import attention_config, hybrid_config

B, A = 16, 64  # hybrid_config(): block size, alignment unit


def tokens(n, start):
    return np.arange(start, start + n, dtype=np.int32)


def fleet_keys(config=None, seed=7):
    return reprise.FleetKeys(config or hybrid_config(), fleet_seed=seed, revision="test-weights")


def engine_cache(keys, config=None, kv_blocks=64, slots=8):
    config = config or hybrid_config()
    return reprise.PrefixCache(config, "chat", kv_blocks=kv_blocks, snapshot_budget_bytes=slots * config.bytes_per_snapshot,
                               hasher_seed=3, state_events=keys)


def router_for(keys, engines=2, config=None, policy="chat", **kw):
    kw.setdefault("entries_per_engine", 4096)
    return reprise.StateRouter(config or hybrid_config(), policy, keys=keys, engines=engines, **kw)


def chat_turn(cache, seq, history, reply):
    """One turn as an engine serves it: prefill `history` (writing the planned captures), decode `reply` one
    token at a time (the last sampled token is never fed), end the turn. Returns (admit plan, history + reply)."""
    plan = cache.admit(seq, history)
    n = len(history)
    cache.commit(seq, n, plan.captures)
    cache.step_complete(cache.current_epoch())
    for t in reply[:-1]:
        cache.extend(seq, [t])
        n += 1
        cache.commit(seq, n)
        cache.step_complete(cache.current_epoch())
    cache.finish(seq)
    cache.step_complete(cache.current_epoch())
    return plan, np.concatenate([history, reply])


def deliver(router, caches):
    for engine, cache in enumerate(caches):
        router.apply(engine, cache.take_state_events())


def test_turn_two_goes_to_the_engine_that_holds_turn_one():
    keys = fleet_keys()
    caches = [engine_cache(keys) for _ in range(3)]
    router = router_for(keys, engines=3)
    loads = np.zeros(3)
    histories = [tokens(41 + 13 * c, 1000 * (c + 1)) for c in range(3)]
    home, turn_end, seq = {}, {}, 0
    for turn in range(3):
        for c in range(3):
            choice = router.route(histories[c], loads=loads)
            seq += 1
            plan, history = chat_turn(caches[choice.engine], seq, histories[c], tokens(9 + c, 50000 + 100 * seq))
            deliver(router, caches)
            # The router's usable tokens are the ones the chosen engine's admit skipped.
            assert plan.usable_tokens == choice.usable_tokens
            if turn == 0:
                assert choice.usable_tokens == 0  # nothing anywhere: the least loaded engine
                home[c] = choice.engine
                loads[choice.engine] += 1  # one conversation each
            else:
                assert choice.engine == home[c] and not choice.redirected_by_load
                # The previous turn's end (off the block grid on the first turns): a decode-continuation snapshot.
                assert choice.usable_tokens == turn_end[c] and plan.restore_exactness == "decode_continuation"
                assert router.usable_tokens()[choice.engine] == choice.usable_tokens
                assert all(u == 0 for e, u in enumerate(router.usable_tokens()) if e != choice.engine)
            turn_end[c] = len(history) - 1  # the last sampled token is not fed
            histories[c] = np.concatenate([history, tokens(7, 90000 + 100 * seq)])  # the user's next message
    assert sorted(home.values()) == [0, 1, 2] and turn_end[0] % B != 0
    for cache in caches:
        cache.check_invariants()


def test_attention_only_counts_every_matched_block():
    config = attention_config()
    keys = fleet_keys(config)
    caches = [reprise.PrefixCache(config, "block_sharing", kv_blocks=64, hasher_seed=3, state_events=keys)
              for _ in range(2)]
    router = router_for(keys, config=config, policy="block_sharing")
    assert not router.has_recurrent and not router.accept_decode_continuation
    prompt = tokens(100, 1)
    plan = caches[1].admit(1, prompt)
    caches[1].commit(1, 100)
    caches[1].release(1)
    deliver(router, caches)
    longer = np.concatenate([prompt, tokens(30, 500)])
    choice = router.route(longer)
    assert choice.engine == 1 and choice.usable_tokens == 96 == caches[1].admit(2, longer).usable_tokens
    assert list(router.matched_tokens()) == [0, 96] and plan.usable_tokens == 0


def test_events_are_copies_that_round_trip():
    keys = fleet_keys()
    cache = engine_cache(keys)
    router = router_for(keys)
    _, history = chat_turn(cache, 1, tokens(150, 1), tokens(20, 5000))  # turn end at 169
    events = cache.take_state_events()
    assert cache.take_state_events() == []  # taken once; the list stays valid
    blocks = [e for e in events if e.kind == "kv_block"]
    snapshots = [e for e in events if e.kind == "snapshot"]
    assert [e.position for e in blocks] == [16 * (i + 1) for i in range(len(blocks))]
    assert all(e.change == "stored" and e.parent is None and len(e.key) == 32 for e in blocks)
    assert {(e.position, e.exactness) for e in snapshots} >= {(169, "decode_continuation")}
    assert all(len(e.parent) == 32 and e.source == keys.source for e in snapshots)
    assert len(set(events)) == len(events)

    # Pickled (from an engine's process to the router's) and back: equal in every field, source included.
    carried = pickle.loads(pickle.dumps(events))
    assert carried == events and [e.source for e in carried] == [keys.source] * len(events)
    router.apply(1, carried)
    assert all(router.holds(1, e) for e in events) and router.entries(1) == len(events)
    following = np.concatenate([history, tokens(5, 9000)])
    assert router.route(following).usable_tokens == 169

    # Built by hand (an engine without a PrefixCache): the same entry, taken on trust.
    turn_end = next(e for e in snapshots if e.position == 169)
    by_hand = reprise.StateEvent("removed", "snapshot", turn_end.key, 169, "decode_continuation", turn_end.parent)
    assert by_hand.source == 0 and by_hand != turn_end
    router.apply(1, by_hand)
    assert not router.holds(1, turn_end) and router.route(following).usable_tokens < 169

    # Keys made alike (same seed, model and revision) name state alike.
    assert fleet_keys().source == keys.source and fleet_keys(seed=8).source != keys.source
    assert cache.state_events is keys and router.keys is keys


def test_lost_duplicated_and_misdelivered_events_cost_at_most_a_miss():
    keys = fleet_keys()
    caches = [engine_cache(keys, kv_blocks=32, slots=2) for _ in range(2)]
    faithful = router_for(keys)
    lossy = router_for(keys)  # never hears a 'removed'
    doubled = router_for(keys)  # hears everything twice

    def deliver_all():
        heard = []
        for engine, cache in enumerate(caches):
            events = cache.take_state_events()
            faithful.apply(engine, events)
            lossy.apply(engine, [e for e in events if e.change == "stored"])
            doubled.apply(engine, events)
            doubled.apply(engine, events)
            heard += events
        return heard

    _, history = chat_turn(caches[0], 1, tokens(150, 1), tokens(20, 5000))
    turn_end = next(e for e in deliver_all() if e.kind == "snapshot" and e.position == 169)
    following = np.concatenate([history, tokens(30, 7000)])
    for r in (faithful, lossy, doubled):
        assert r.route(following).engine == 0 and r.route(following).usable_tokens == 169
    assert [doubled.entries(e) for e in range(2)] == [faithful.entries(e) for e in range(2)]

    # Other conversations on engine 0 evict the turn end (32 blocks, 2 snapshot slots).
    for k in range(6):
        chat_turn(caches[0], 10 + k, tokens(200, 100000 * (k + 1)), tokens(5, 900000 + 100 * k))
    removed = [e for e in deliver_all() if e.change == "removed"]
    assert any(e.kind == "snapshot" and e.key == turn_end.key for e in removed)
    assert not faithful.holds(0, turn_end) and not doubled.holds(0, turn_end) and lossy.holds(0, turn_end)
    stale = lossy.route(following)
    assert stale.engine == 0 and stale.usable_tokens == 169  # the router does not know
    fresh = faithful.route(following)
    assert doubled.route(following).usable_tokens == fresh.usable_tokens
    # The engine verifies: its admit reuses what it still holds, which the faithful router predicted.
    plan = caches[0].admit(100, following)
    assert plan.usable_tokens < stale.usable_tokens
    assert plan.usable_tokens == faithful.usable_tokens()[0]
    caches[0].release(100)

    # Events credited to the wrong engine: the router sends the prompt there, where it is a plain miss.
    misdelivered = router_for(keys)
    _, other = chat_turn(caches[1], 200, tokens(120, 300000), tokens(12, 310000))
    misdelivered.apply(0, caches[1].take_state_events())
    after = np.concatenate([other, tokens(4, 320000)])
    wrong = misdelivered.route(after)
    assert wrong.engine == 0 and wrong.usable_tokens == 131
    miss = caches[0].admit(201, after)
    assert miss.usable_tokens == 0 and miss.restore_slot == -1 and miss.shared_blocks == 0
    caches[0].release(201)
    assert caches[1].admit(202, after).usable_tokens == 131  # where the state is
    caches[1].release(202)
    for cache in caches:
        cache.check_invariants()


def test_the_load_cap_redirects_to_an_engine_under_it():
    keys = fleet_keys()
    caches = [engine_cache(keys) for _ in range(2)]
    router = router_for(keys, load_slack=0.25)
    no_slack = router_for(keys, load_slack=0.0)
    _, history = chat_turn(caches[0], 1, tokens(100, 1), tokens(10, 2000))
    events = caches[0].take_state_events()
    router.apply(0, events)
    no_slack.apply(0, events)
    following = np.concatenate([history, tokens(8, 3000)])
    # Engine 0's cap is (sum of loads + 1) / 2 x (1 + load_slack).
    assert router.route(following, loads=[1, 0]).engine == 0  # 1 <= 1.25
    assert router.route(following, loads=[4, 3]).engine == 0  # 4 <= 5
    capped = router.route(following, loads=[2, 0])  # 2 > 1.875
    assert capped.engine == 1 and capped.redirected_by_load and capped.usable_tokens == 0
    assert capped.best_engine == 0 and capped.best_usable_tokens == 109
    assert caches[1].admit(9, following).usable_tokens == 0  # the redirected prompt is prefilled there
    assert no_slack.route(following, loads=[1.0, 0.0]).engine == 0  # 1 <= (1 + 1) / 2
    assert no_slack.route(following, loads=np.array([1.5, 0.0])).engine == 1  # 1.5 > 1.25
    # With nothing usable anywhere, the least loaded engine.
    assert router.route(tokens(50, 777777), loads=[3, 2]).engine == 1


# ----- errors: each raises the package's exception and leaves the router as it was -----


def busy_router():
    """A router that heard two engines, each holding one conversation; and the next turn of engine 0's."""
    keys = fleet_keys()
    caches = [engine_cache(keys) for _ in range(2)]
    router = router_for(keys)
    _, history = chat_turn(caches[0], 1, tokens(100, 1), tokens(10, 2000))
    chat_turn(caches[1], 2, tokens(70, 40000), tokens(10, 42000))
    deliver(router, caches)
    return router, np.concatenate([history, tokens(8, 3000)])


def held(router):
    """What the router holds and its last route's scores."""
    return ([router.entries(e) for e in range(router.engines)], list(router.usable_tokens()),
            list(router.matched_tokens()))


def decision(router, probe):
    c = router.route(probe, loads=[0.5, 0])
    return c.engine, c.usable_tokens, c.best_engine, c.best_usable_tokens, c.redirected_by_load


def event(change="stored", kind="kv_block", position=16, exactness="prefill_exact", parent=None):
    return reprise.StateEvent(change, kind, bytes(range(32)), position, exactness,
                              bytes(32) if kind == "snapshot" and parent is None else parent)


def foreign_events():
    """Events of a cache whose keys have another fleet seed."""
    keys = fleet_keys(seed=8)
    cache = engine_cache(keys)
    chat_turn(cache, 1, tokens(100, 1), tokens(10, 2000))
    return cache.take_state_events()


ROUTER_ERRORS = [
    ("engine past the last", reprise.OutOfRange, lambda r, p: r.apply(2, [event()])),
    ("negative engine", reprise.OutOfRange, lambda r, p: r.apply(-1, event())),
    ("clear of no engine", reprise.OutOfRange, lambda r, p: r.clear(5)),
    ("entries of no engine", reprise.OutOfRange, lambda r, p: r.entries(2)),
    ("holds of no engine", reprise.OutOfRange, lambda r, p: r.holds(2, event())),
    ("events from other keys", reprise.InvalidArgument, lambda r, p: r.apply(0, foreign_events())),
    ("a bad event after good ones", reprise.Misaligned,
     lambda r, p: r.apply(1, [event(position=32), event(position=48), event(position=17)])),
    ("a foreign event after good ones", reprise.InvalidArgument,
     lambda r, p: r.apply(1, [event(position=32), foreign_events()[0]])),
    ("position 0", reprise.InvalidArgument, lambda r, p: r.apply(0, event(position=0))),
    ("prefill-exact snapshot off the alignment unit", reprise.Misaligned,
     lambda r, p: r.apply(0, event(kind="snapshot", position=32))),
    ("not an event", TypeError, lambda r, p: r.apply(0, [event(position=32), "stored"])),
    ("not iterable", TypeError, lambda r, p: r.apply(0, 3)),
    ("loads of the wrong length", reprise.SizeMismatch, lambda r, p: r.route(p, loads=[0, 0, 0])),
    ("loads of two dimensions", reprise.SizeMismatch, lambda r, p: r.route(p, loads=[[0, 0]])),
    ("a negative load", reprise.InvalidArgument, lambda r, p: r.route(p, loads=[0, -1])),
    ("a NaN load", reprise.InvalidArgument, lambda r, p: r.route(p, loads=[math.nan, 0])),
    ("an infinite load", reprise.InvalidArgument, lambda r, p: r.route(p, loads=np.array([0, np.inf]))),
    ("media digest over 32 bytes", reprise.InvalidArgument,
     lambda r, p: r.route(p, extra_keys=reprise.ExtraKeys(media=[(1, bytes(33))]))),
    ("media items out of order", reprise.InvalidArgument,
     lambda r, p: r.route(p, extra_keys=reprise.ExtraKeys(media=[(5, b"a"), (1, b"b")]))),
    ("a media item past the prompt", reprise.OutOfRange,
     lambda r, p: r.route(p, extra_keys=reprise.ExtraKeys(media=[(len(p), b"a")]))),
]


@pytest.mark.parametrize("what,error,call", ROUTER_ERRORS, ids=[c[0] for c in ROUTER_ERRORS])
def test_router_errors_change_nothing(what, error, call):
    router, probe = busy_router()
    decided = decision(router, probe)
    assert decided == (0, 109, 0, 109, False)
    before = held(router)
    with pytest.raises(error) as info:
        call(router, probe)
    if issubclass(error, reprise.Error):
        assert info.value.errc in str(info.value)
    assert held(router) == before
    assert decision(router, probe) == decided
    # The router still works after the error.
    router.apply(1, event(position=32))
    assert router.entries(1) == before[0][1] + 1


def test_error_messages_say_what_is_wrong():
    router, probe = busy_router()
    with pytest.raises(reprise.OutOfRange, match=r"engine 2 is not one of this router's engines, 0 \.\. 1"):
        router.apply(2, [])
    with pytest.raises(reprise.SizeMismatch, match="loads has 3 entries; the router has 2 engines"):
        router.route(probe, loads=[0, 0, 0])
    with pytest.raises(reprise.InvalidArgument, match=r"loads\[1\] = -1.0: a load is a non-negative, finite"):
        router.route(probe, loads=[0, -1])
    with pytest.raises(reprise.InvalidArgument, match="computed with other keys"):
        router.apply(0, foreign_events())
    with pytest.raises(reprise.Misaligned, match=r"events\[1\].*multiple of the block size, 16"):
        router.apply(0, [event(position=32), event(position=20)])
    with pytest.raises(reprise.Misaligned, match="multiple of the alignment unit, 64"):
        router.apply(0, event(kind="snapshot", position=32))
    with pytest.raises(TypeError, match=r"events\[1\] is a str, not a StateEvent"):
        router.apply(0, [event(position=32), "x"])
    # A snapshot for an attention-only model.
    config = attention_config()
    attention = router_for(fleet_keys(config), config=config, policy="block_sharing")
    with pytest.raises(reprise.InvalidArgument, match="a snapshot, for a model without recurrent layers"):
        attention.apply(0, event(kind="snapshot", position=64))
    assert attention.entries(0) == 0


CREATE_ERRORS = [
    (reprise.InvalidArgument, lambda k: router_for(k, engines=0)),
    (reprise.InvalidArgument, lambda k: router_for(k, engines=-1)),
    (reprise.InvalidArgument, lambda k: router_for(k, load_slack=-0.5)),
    (reprise.InvalidArgument, lambda k: router_for(k, load_slack=math.inf)),
    (reprise.InvalidArgument, lambda k: router_for(k, entries_per_engine=0)),
    (reprise.InvalidArgument, lambda k: router_for(k, engines=4, entries_per_engine=2**30)),
    (reprise.InvalidArgument, lambda k: router_for(k, max_prompt_tokens=0)),
    (reprise.InvalidArgument, lambda k: router_for(fleet_keys(attention_config()))),  # keys of another model
    (reprise.InvalidArgument, lambda k: router_for(fleet_keys(hybrid_config(block_size=32)))),
    (TypeError, lambda k: router_for("keys")),
    (ValueError, lambda k: router_for(k, policy="lru")),
    (reprise.InvalidArgument, lambda k: engine_cache(fleet_keys(attention_config()))),
    (TypeError, lambda k: engine_cache(b"keys")),
]


@pytest.mark.parametrize("error,call", CREATE_ERRORS)
def test_create_errors(error, call):
    with pytest.raises(error):
        call(fleet_keys())


def test_hand_built_events_are_checked():
    key = bytes(32)
    with pytest.raises(ValueError, match="unknown change"):
        reprise.StateEvent("added", "kv_block", key, 16)
    with pytest.raises(ValueError, match="unknown kind"):
        reprise.StateEvent("stored", "block", key, 16)
    with pytest.raises(ValueError, match="unknown exactness"):
        reprise.StateEvent("stored", "kv_block", key, 16, "exact")
    with pytest.raises(ValueError, match="32 bytes"):
        reprise.StateEvent("stored", "kv_block", bytes(31), 16)
    with pytest.raises(ValueError, match="needs its parent"):
        reprise.StateEvent("stored", "snapshot", key, 64)
    with pytest.raises(ValueError, match="no parent"):
        reprise.StateEvent("stored", "kv_block", key, 16, parent=key)


def test_router_surface():
    keys = fleet_keys()
    router = router_for(keys, engines=3, policy="strict", load_slack=0.5, entries_per_engine=1000,
                        max_prompt_tokens=4096)
    assert (router.engines, router.policy, router.block_size, router.alignment) == (3, "strict", B, A)
    assert router.has_recurrent and not router.accept_decode_continuation and router_for(keys).accept_decode_continuation
    assert (router.load_slack, router.entries_per_engine, router.max_prompt_tokens) == (0.5, 1000, 4096)
    assert router.memory_bytes > 3 * 1000 * 64
    assert repr(router) == "StateRouter(policy='strict', engines=3, entries=[0, 0, 0])"
    assert list(router.usable_tokens()) == [0, 0, 0]
    choice = router.route(tokens(10, 1))
    assert repr(choice) == ("RouteChoice(engine=0, usable_tokens=0, best_engine=0, best_usable_tokens=0, "
                            "redirected_by_load=False)")
    assert repr(keys).startswith("FleetKeys(fleet_seed=7, revision='test-weights', source=0x")
    assert len(keys.fingerprint) == 32 and keys.block_size == B
    with pytest.warns(DeprecationWarning, match="StateRouter: policy 'snapshot_prefill_exact' is deprecated"):
        assert not router_for(keys, policy="snapshot_prefill_exact").accept_decode_continuation
    # Without state_events a cache reports nothing.
    plain = reprise.PrefixCache(hybrid_config(), "chat", kv_blocks=16, snapshot_budget_bytes=2 * hybrid_config().bytes_per_snapshot)
    chat_turn(plain, 1, tokens(40, 1), tokens(3, 100))
    assert plain.take_state_events() == [] and plain.state_events is None


def test_caches_and_routers_keep_their_keys_alive():
    keys = fleet_keys()
    cache, router = engine_cache(keys), router_for(keys)
    source = keys.source
    del keys
    gc.collect()
    _, history = chat_turn(cache, 1, tokens(60, 1), tokens(5, 100))
    router.apply(0, cache.take_state_events())
    assert router.route(np.concatenate([history, tokens(3, 200)])).usable_tokens == 64
    assert cache.state_events.source == router.keys.source == source
