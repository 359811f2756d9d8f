# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.mlx end to end, through mlx-lm's HTTP API (/v1/chat/completions, greedy, `logprobs: true`: mlx-lm returns
each chosen token's id and log-probability), on random-weight checkpoints written at test time.

References: 'off' is mlx-lm's own server with its prompt cache holding nothing; a Session is one conversation that
never stops, driven in-process by mlx-lm's BatchGenerator. Comparisons are exact (token ids and float32
log-probabilities, which JSON carries exactly).

Measured before writing these (mlx-lm 0.32.2, mlx-cpu 0.32.4; a 700-token prompt through mlx-lm's BatchGenerator in
one piece and split at 16, 64, 100, 192, 256, 300, 512, 600, 699): the prefill is bitwise equal to one piece for any
split on the Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (gated delta, mlx_lm.models.gated_delta: a per-token recurrence on
the CPU) and Llama checkpoints, and on Nemotron-H, Granite-4.0-H and Falcon-H1 only for splits on the 256-token grid
from the start of the prefill: all three run their Mamba2 mixers through mlx_lm.models.ssm.ssm_update, which on the
CPU is ssm_attn, an SSD scan in 256-token steps from each call's start (the quadratic form within a step, the state
carried between steps: another split sums in another order). So on those three 'strict' (captures on that grid)
equals caching off when mlx-lm's own prefill is on that grid, i.e. without a system message (mlx-lm splits its
prefill at the system end), and 'chat' (captures at block ends) equals the session that never stopped, not caching
off."""

from __future__ import annotations

import concurrent.futures
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import harness
import models

ARCHS = ["nemotron_h", "granitemoehybrid", "falcon_h1", "qwen3_next", "qwen3_5", "qwen3_5_moe", "llama"]
HYBRID = ARCHS[:-1]
# Any prefill split is bitwise equal (measured, see above); the others' Mamba2 scan only on its 256-token grid.
SPLIT_INVARIANT = {"qwen3_next", "qwen3_5", "qwen3_5_moe", "llama"}
WORDS = ["sea", "sky", "fish", "boat", "wind", "rain", "salt", "reef", "tide", "gull", "shell", "sand", "wave",
         "storm", "light", "deep", "blue", "cold", "north", "harbor", "rope", "sail", "map", "star"]


def text(seed: int, n_chars: int) -> str:
    rng = random.Random(seed)
    out = []
    while sum(len(w) + 1 for w in out) < n_chars:
        out.append(rng.choice(WORDS))
    return " ".join(out)[:n_chars]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {a: models.write_checkpoint(root / a, a) for a in ARCHS}


KINDS = ("off", "strict", "chat", "faulty-strict")


@pytest.fixture(scope="session")
def servers(checkpoints, tmp_path_factory):
    """One server per kind serving every checkpoint (each request names its model), all four started side by side at
    the first use and closed at the end, their logs in the temp dir; servers(arch, kind) is one test's view of one
    (harness.ModelView: that model's requests, its figures from the test's start)."""
    logs = tmp_path_factory.mktemp("logs")
    running: dict[str, harness.Server] = {}

    def get(arch: str, kind: str) -> harness.ModelView:
        if not running:
            running.update({k: harness.start(k, checkpoints[arch], logs, wait=False) for k in KINDS})
        return harness.ModelView(running[kind], checkpoints[arch], reprise=kind != "off")

    yield get
    for s in running.values():
        s.close()


@pytest.fixture(scope="session")
def sessions(checkpoints):
    return lambda arch: harness.Session(checkpoints[arch])


_PAIR = concurrent.futures.ThreadPoolExecutor(2)


def at_once(*requests):
    """The results of requests to different servers, sent at the same time (each server computes on its own core;
    every server serves its requests in the order it receives them, so a comparison is the same either way)."""
    return tuple(f.result() for f in [_PAIR.submit(r) for r in requests])


def same(a: dict, b: dict) -> bool:
    return a["ids"] == b["ids"] and a["logprobs"] == b["logprobs"]


def system_end(tokenizer, system: str) -> int:
    """Where the system prompt's tokens end, as mlx-lm finds it (the system message rendered alone)."""
    a = tokenizer.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": ""}])
    b = tokenizer.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": "x"}])
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


# ----------------------------------------------------------------------------------------------------------------
# Options refused at start


def refused(args: list[str], capsys, monkeypatch) -> str:
    """What reprise.mlx.server's main() prints when it refuses `args` at start, run in this process (a refusal
    comes before the model loads; a server that would start instead fails the test)."""
    from reprise.mlx import server

    def started(**options):
        raise AssertionError(f"the server would start with {args}")

    monkeypatch.setattr(server, "PromptCache", started)
    with pytest.raises(SystemExit) as e:
        server.main(args)
    assert e.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--reprise", "bogus"], "invalid choice"),
    (["--reprise", "chat", "--reprise-kv-budget", "0"], "kv_budget_bytes must be a positive integer"),
    (["--reprise", "chat", "--reprise-kv-budget", "12Q"], "is not a size"),
    (["--reprise", "chat", "--reprise-snapshot-budget", "1000"], "holds no snapshot of this model"),
    (["--reprise", "chat", "--reprise-block-size", "-16"], "block_size must be a positive integer"),
    (["--reprise", "chat", "--kv-bits", "4"], "--kv-bits"),
    (["--reprise", "chat", "--prompt-cache-bytes", "1G"], "--reprise-kv-budget"),
    (["--reprise", "chat", "--draft-model", "elsewhere"], "--draft-model"),
    (["--reprise", "chat", "--reprise-block-size", "24"], "Reprise cannot read this checkpoint"),
])
def test_bad_options_are_refused_at_start(checkpoints, capsys, monkeypatch, args, message):
    err = refused(args + ["--model", str(checkpoints["nemotron_h"])], capsys, monkeypatch)
    assert message in err, err


def test_a_model_directory_without_config_is_refused(tmp_path):
    """Through the command line, as a user starts it: exit status 2 and the message."""
    r = subprocess.run([sys.executable, "-m", "reprise.mlx.server", "--reprise", "strict", "--model", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no config.json" in r.stderr, r.stderr


@pytest.mark.parametrize("config, message", [
    # mlx-lm ships Jamba, whose Mamba-1 layers hold an ArraysCache like Mamba2's: only the architecture tells.
    ({"architectures": ["JambaForCausalLM"], "model_type": "jamba"}, "Mamba-1 layers"),
    ({"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2"}, "short-convolution layers"),
    # A sliding-window layer (mlx-lm: a RotatingKVCache, which drops old tokens) in an attention-only model.
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 4, "hidden_size": 64,
      "num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"], "sliding_window": 64},
     "unsupported layer kind 'sliding_attention'"),
])
def test_models_with_layers_reprise_cannot_hold_are_refused_at_start(tmp_path, capsys, monkeypatch, config, message):
    (tmp_path / "config.json").write_text(json.dumps(config))
    err = refused(["--reprise", "chat", "--model", str(tmp_path)], capsys, monkeypatch)
    assert "Reprise cannot read this checkpoint's layers" in err and message in err, err


def test_a_cache_layout_reprise_cannot_hold_is_named():
    """The launcher also checks the cache list mlx-lm makes for the model (built lazily, before serving), which
    catches what config.json does not tell: here a sliding-window Llama built by mlx-lm itself, whose RotatingKVCache
    Reprise does not hold."""
    from mlx_lm.models import llama

    from reprise.mlx.prompt_cache import cache_layout, check_layout, model_config

    model = llama.Model(llama.ModelArgs.from_dict({**models.CONFIGS["llama"], "sliding_window": 64,
                                                   "layer_types": ["full_attention", "sliding_attention",
                                                                   "full_attention"]}))
    with pytest.raises(ValueError, match="RotatingKVCache"):
        cache_layout(model)
    # And the layer counts against Reprise's reading of config.json, which sizes the pools.
    llama_model = llama.Model(llama.ModelArgs.from_dict(models.CONFIGS["llama"]))
    with pytest.raises(ValueError, match="has 3 attention and 0 recurrent layers, but Reprise reads config.json as "
                                         "1 attention and 2 recurrent"):
        check_layout(llama_model, model_config(models.CONFIGS["nemotron_h"], 16))


# ----------------------------------------------------------------------------------------------------------------
# strict: every hit bitwise a cold prefill


def strict_workload(arch: str, seed: int) -> list[list[dict]]:
    doc = text(seed, 620)
    # The Mamba2 models without a system message: mlx-lm's own prefill then starts its Mamba2 steps at 0, on the grid.
    head = [] if arch not in SPLIT_INVARIANT else [{"role": "system", "content": text(seed + 1, 90)}]
    first = head + [{"role": "user", "content": doc + " what is here?"}]
    return [first, head + [{"role": "user", "content": doc + " and what else, then?"}],
            head + [{"role": "user", "content": doc[:300] + " short one"}]]


@pytest.mark.parametrize("arch", ARCHS)
def test_strict_equals_caching_off(servers, arch):
    off, strict = servers(arch, "off"), servers(arch, "strict")
    cached = []
    convo = strict_workload(arch, seed=10)
    for i, messages in enumerate(convo + [None]):
        if messages is None:   # the first conversation continued
            messages = convo[0] + [{"role": "assistant", "content": first_reply}, {"role": "user", "content": "more"}]
        a, b = at_once(lambda: off.chat(messages), lambda: strict.chat(messages))
        if i == 0:
            first_reply = b["text"]
        assert a["ids"] == b["ids"], f"request {i}: tokens differ"
        assert a["logprobs"] == b["logprobs"], f"request {i}: log-probabilities differ"
        cached.append(b["cached"])
    print(f"\n{arch} strict: cached tokens per request {cached}")
    assert cached[1] > 0 and cached[3] > 0   # the hits happened: the equality is not that of two cold prefills
    m = strict.metrics()
    assert m["restores"] >= 2 and m["untracked"] == 0


@pytest.mark.parametrize("arch", HYBRID)
def test_a_corrupted_snapshot_is_caught(servers, arch):
    """The same comparison as above against a server whose snapshots are perturbed: the hit is taken and the
    log-probabilities differ, so the equality above can fail."""
    off, faulty = servers(arch, "off"), servers(arch, "faulty-strict")
    convo = strict_workload(arch, seed=20)
    a0, b0 = at_once(lambda: off.chat(convo[0]), lambda: faulty.chat(convo[0]))
    assert same(a0, b0)   # no restore yet: equal
    a1, b1 = at_once(lambda: off.chat(convo[1]), lambda: faulty.chat(convo[1]))
    assert b1["cached"] > 0
    assert a1["logprobs"] != b1["logprobs"]


# ----------------------------------------------------------------------------------------------------------------
# chat: every hit continues the same session


@pytest.mark.parametrize("arch", ARCHS)
def test_chat_equals_a_session_that_never_stopped(servers, sessions, arch):
    chat = servers(arch, "chat")
    session = sessions(arch)
    tok = session.tokenizer
    messages = [{"role": "system", "content": text(30, 200)}, {"role": "user", "content": text(31, 150)}]
    previous_total = 0
    for turn in range(3):
        got = chat.chat(messages, max_tokens=10)
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True)
        assert len(prompt) == got["prompt_tokens"]
        stops = chat.metrics()["last_request"]["splits"]
        want = session.turn(prompt, stops, max_tokens=10)
        assert got["ids"] == want["ids"], f"turn {turn}: tokens differ from the session"
        assert got["logprobs"] == want["logprobs"], f"turn {turn}: log-probabilities differ from the session"
        if turn > 0:
            if arch in HYBRID:   # the previous turn's end, restored: its prompt and reply skipped
                assert got["cached"] == previous_total
                assert chat.metrics()["last_request"]["restore_exactness"] == "decode_continuation"
            else:                # block_sharing: whole blocks only
                B = 16
                assert got["cached"] >= previous_total // B * B - B
        previous_total = got["prompt_tokens"] + len(got["ids"])
        messages = messages + [{"role": "assistant", "content": got["text"]},
                               {"role": "user", "content": text(40 + turn, 40)}]


@pytest.mark.parametrize("arch, system_chars", [("nemotron_h", 180), ("nemotron_h", 300), ("granitemoehybrid", 300),
                                               ("falcon_h1", 180), ("qwen3_next", 180), ("qwen3_5", 180),
                                               ("qwen3_5_moe", 180)])
def test_a_new_question_over_a_shared_document(servers, sessions, arch, system_chars):
    """Three conversations over one system prompt and document: the second restores the system prompt's end
    (captured at the first's first meeting), the third the branch where the second left the first.

    The branch needs the second conversation to share the first's KV past the system end, which Reprise allows when
    the system end's capture is prefill-exact: on the alignment grid. The system end is rounded down to the alignment
    when it reaches it, else to the block: on the Mamba2 models (alignment 256 in mlx-lm) a 196-token system prompt
    gives a decode-continuation capture at 192 and the third conversation restores 192 again; a 316-token one a
    prefill-exact capture at 256, and the third conversation restores the branch. The test asserts which case it is
    in."""
    chat, off = servers(arch, "chat"), servers(arch, "off")
    tok = sessions(arch).tokenizer
    system, doc = text(50 + system_chars, system_chars), text(51 + system_chars, 400)
    results = []
    for q in ["who wrote it?", "when was it?", "why so?"]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": doc + " " + q}]
        results.append(at_once(lambda: chat.chat(messages), lambda: off.chat(messages)))
    B = 16
    s_end = system_end(tok, system)
    shared = len(tok.apply_chat_template([{"role": "system", "content": system},
                                          {"role": "user", "content": doc + " "}]))
    cached = [r[0]["cached"] for r in results]
    print(f"\n{arch} shared document: system end {s_end}, shared {shared}, cached {cached}")
    alignment = next(iter(chat.metrics()["models"].values()))["alignment"]
    assert cached[0] == 0
    unit = alignment if s_end >= alignment else B
    assert cached[1] == s_end // unit * unit > 0
    if cached[1] % alignment == 0:
        assert cached[2] >= (shared - 1) // B * B - B and cached[2] > cached[1]
    else:
        assert cached[2] == cached[1]
    if arch in SPLIT_INVARIANT or s_end % alignment == 0:
        assert same(*results[0])   # the first conversation computes everything, cold
    if arch in SPLIT_INVARIANT:
        for got, want in results:
            assert same(got, want)


@pytest.mark.parametrize("arch", HYBRID)
def test_a_shared_document_without_a_system_prompt(servers, arch):
    """No system prompt, so no capture offset: the second conversation computes the document again and captures the
    branch; the third restores it."""
    chat, off = servers(arch, "chat"), servers(arch, "off")
    doc = text(60, 400)
    asks = [[{"role": "user", "content": doc + " " + q}] for q in ["first?", "second?", "third?"]]
    results = [at_once(lambda: chat.chat(m), lambda: off.chat(m)) for m in asks]
    cached = [r[0]["cached"] for r in results]
    print(f"\n{arch} shared document, no system prompt: cached {cached}")
    assert cached[0] == 0
    assert cached[2] >= 400 // 16 * 16 - 16
    if arch in SPLIT_INVARIANT:
        for got, want in results:
            assert same(got, want)


@pytest.mark.parametrize("arch", HYBRID)
def test_forks_and_regenerations(servers, arch):
    """Two different second turns after one first turn both restore its end; a regenerated turn (the same request
    again) restores it again and gives the same reply, bit for bit."""
    chat = servers(arch, "chat")
    first = [{"role": "system", "content": text(70, 120)}, {"role": "user", "content": text(71, 200)}]
    r1 = chat.chat(first, max_tokens=8)
    total = r1["prompt_tokens"] + len(r1["ids"])
    base = first + [{"role": "assistant", "content": r1["text"]}]
    fork_a = chat.chat(base + [{"role": "user", "content": "left branch"}], max_tokens=8)
    fork_b = chat.chat(base + [{"role": "user", "content": "right branch, a longer one"}], max_tokens=8)
    again_a = chat.chat(base + [{"role": "user", "content": "left branch"}], max_tokens=8)
    assert fork_a["cached"] == total and fork_b["cached"] == total
    assert again_a["cached"] >= total
    assert same(fork_a, again_a)
    m = chat.metrics()
    assert m["untracked"] == 0
    assert all(v["live_sequences"] == 0 for v in m["models"].values())


@pytest.mark.parametrize("arch", HYBRID)
def test_concurrent_conversations(servers, arch):
    """Four conversations at once, two turns each (the server batches their prefills and decodes): every second
    turn restores its own first turn's end, and Reprise's bookkeeping holds after every request (the servers run
    with --reprise-check-invariants) and ends with no live sequence."""
    chat = servers(arch, "chat")

    def conversation(i: int) -> tuple[int, int]:
        first = [{"role": "system", "content": text(90, 100)}, {"role": "user", "content": text(91 + i, 120)}]
        r1 = chat.chat(first, max_tokens=6)
        r2 = chat.chat(first + [{"role": "assistant", "content": r1["text"]}, {"role": "user", "content": "next"}],
                       max_tokens=6)
        return r1["prompt_tokens"] + len(r1["ids"]), r2["cached"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(conversation, range(4)))
    print(f"\n{arch} concurrent: (first turn total, second turn cached) {results}")
    for total, cached in results:
        assert cached == total
    m = chat.metrics()
    assert m["untracked"] == 0
    assert all(v["live_sequences"] == 0 and v["live_sequences_tracked"] == 0 for v in m["models"].values())


@pytest.mark.parametrize("arch", HYBRID)
def test_unbatched_requests(servers, arch):
    """A request with a seed is not batchable: mlx-lm serves it alone (stream_generate, one prefill call, no segment
    ends). Reprise still restores its hit and records its turn end; the next turn restores that, and the replies equal
    caching off's served the same way on the split-invariant models (on the Mamba2 ones a prefill from a turn end
    is a continuation)."""
    chat, off = servers(arch, "chat"), servers(arch, "off")
    first = [{"role": "system", "content": text(110, 100)}, {"role": "user", "content": text(111, 150)}]
    r1 = chat.chat(first, max_tokens=6, seed=3)
    second = first + [{"role": "assistant", "content": r1["text"]}, {"role": "user", "content": "and then"}]
    r2 = chat.chat(second, max_tokens=6, seed=3)
    m = chat.metrics()
    assert m["untracked"] == 0
    assert r2["cached"] == r1["prompt_tokens"] + len(r1["ids"])
    assert same(r1, off.chat(first, max_tokens=6, seed=3))
    if arch in SPLIT_INVARIANT:
        assert same(r2, off.chat(second, max_tokens=6, seed=3))


@pytest.mark.parametrize("arch", ["falcon_h1", "qwen3_next", "llama"])
def test_a_request_abandoned_by_its_client_ends_its_sequence(servers, arch):
    """A streamed request whose client closes the connection mid-reply: mlx-lm drops it from its batch without calling
    the prompt cache, and Reprise ends its sequence where the state was (its prompt's KV cached, no live sequence
    left, the bookkeeping checked after it), so the same request sent again skips its prompt."""
    import time

    chat = servers(arch, "chat")
    messages = [{"role": "system", "content": text(120, 200)}, {"role": "user", "content": text(121, 150)}]
    before = chat.metrics()
    chat.abandon(messages)
    deadline = time.time() + 60
    while (m := chat.metrics())["abandoned"] == before["abandoned"]:
        assert time.time() < deadline, "the abandoned request's sequence did not end"
        time.sleep(0.05)
    assert m["abandoned"] == before["abandoned"] + 1 and m["untracked"] == before["untracked"]
    assert all(v["live_sequences"] == 0 and v["live_sequences_tracked"] == 0 for v in m["models"].values())
    assert m["finished"] == before["finished"] + 1
    again = chat.chat(messages, max_tokens=6)
    print(f"\n{arch} abandoned request: the same request again skips {again['cached']} of {again['prompt_tokens']}")
    if arch in HYBRID:
        # Its turn end was captured where it stopped (past this prompt); this prompt restores its system end.
        assert m["turn_end_captures"] == before["turn_end_captures"] + 1
        assert again["cached"] == m["last_request"]["splits"][0] > 0
    else:   # block_sharing: the prompt's whole blocks
        assert again["cached"] >= again["prompt_tokens"] // 16 * 16 - 16
    m = chat.metrics()
    assert m["untracked"] == before["untracked"]
    assert all(v["live_sequences"] == 0 for v in m["models"].values())
