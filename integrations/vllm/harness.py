# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Runs vLLM in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0: one process, bitwise reproducible) on a checkpoint from
models.py, with caching off, vLLM's own prefix caching or Reprise's connector, greedy from token ids; serves
multi-turn conversations."""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from dataclasses import dataclass, field


@dataclass
class Turn:
    tokens: list[int]
    logprobs: list[float]
    prompt_tokens: int
    cached_tokens: int


@dataclass
class Conversation:
    system: list[int]
    users: list[list[int]]          # one user message per turn
    reply_tokens: list[int]         # reply length per turn
    turns: list[Turn] = field(default_factory=list)


def engine(model: str, mode: str, kv_cache_bytes: int = 1 << 30, max_num_seqs: int = 4, max_model_len: int = 4096,
           num_blocks: int | None = None, engine_args: dict | None = None, **options):
    """mode: 'off', 'vllm' (vLLM's own prefix caching) or a Reprise policy ('strict', 'chat'). num_blocks: vLLM's
    KV cache blocks (num_gpu_blocks_override), all groups together; None: what kv_cache_bytes holds. engine_args:
    further arguments of vLLM's LLM (enable_lora, enable_prompt_embeds, ...)."""
    import json

    from vllm import LLM
    from vllm.distributed.kv_transfer.kv_transfer_state import ensure_kv_transfer_shutdown

    # An in-process engine leaves its worker-side connector in a process-wide slot that the next engine would take
    # over as its own (vLLM initializes it once per process), and that an engine without a connector would call.
    ensure_kv_transfer_shutdown()

    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    # The checkpoint's own dtype (vLLM's 'auto' runs fp32 checkpoints in bf16 on a CPU).
    dtype = config.get("dtype") or config.get("torch_dtype") or "auto"
    kw = dict(model=model, dtype=dtype, skip_tokenizer_init=True, max_model_len=max_model_len,
              max_num_seqs=max_num_seqs,
              gpu_memory_utilization=0.1, kv_cache_memory_bytes=kv_cache_bytes, seed=0,
              enable_prefix_caching=mode == "vllm", max_num_batched_tokens=8192, num_gpu_blocks_override=num_blocks)
    kw.update(engine_args or {})
    if mode not in ("off", "vllm"):
        import reprise.vllm

        kw["kv_transfer_config"] = reprise.vllm.kv_transfer_config(policy=mode, **options)
    return LLM(**kw)


def record_batches(llm) -> list[tuple[tuple[int, int], ...]]:
    """From now on, each step's batch as vLLM's scheduler forms it: (request, tokens scheduled) pairs, requests
    numbered in order of first appearance (vLLM's own ids count across engines). Returns the list it fills."""
    core = llm.llm_engine.engine_core.engine_core
    schedule = getattr(core.scheduler.schedule, "__wrapped__", core.scheduler.schedule)
    steps: list[tuple[tuple[int, int], ...]] = []
    ids: dict[str, int] = {}

    def recorded(*args, **kwargs):
        out = schedule(*args, **kwargs)
        steps.append(tuple(sorted((ids.setdefault(r, len(ids)), n) for r, n in out.num_scheduled_tokens.items())))
        return out

    recorded.__wrapped__ = schedule
    core.scheduler.schedule = recorded
    return steps


def connector(llm):
    """The scheduler side of the connector of an in-process engine."""
    return llm.llm_engine.engine_core.engine_core.scheduler.connector


def params(max_tokens: int, delta: bool = False, capture_offsets: list[int] | None = None):
    """Greedy sampling of `max_tokens` tokens with their log-probabilities; `capture_offsets`: the request's
    (reprise.vllm.extra_args)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    extra = None
    if capture_offsets is not None:
        import reprise.vllm

        extra = reprise.vllm.extra_args(capture_offsets)
    return SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=0, ignore_eos=True, detokenize=False,
                          output_kind=RequestOutputKind.DELTA if delta else RequestOutputKind.CUMULATIVE,
                          extra_args=extra)


def history(c: Conversation, turn: int) -> list[int]:
    """The prompt of turn `turn`: the system prompt, then every earlier user message and reply, then its message."""
    h = list(c.system)
    for t in range(turn):
        h += c.users[t] + c.turns[t].tokens
    return h + c.users[turn]


def _turn(out, prompt_tokens: int) -> Turn:
    o = out.outputs[0]
    return Turn(list(o.token_ids), [next(iter(lp.values())).logprob for lp in o.logprobs], prompt_tokens,
                out.num_cached_tokens or 0)


def serve(llm, conversations: list[Conversation], concurrent: int = 1, system_offsets: bool = False) -> None:
    """Serves every conversation turn by turn: round t sends turn t of every conversation, `concurrent` prompts per
    generate call (1: one request at a time, the batch composition of every run alike). `system_offsets`: each
    request passes its system prompt's end as a capture offset, as an application that applies a chat template
    knows it."""
    from vllm.inputs import TokensPrompt

    for t in range(max(len(c.users) for c in conversations)):
        live = [c for c in conversations if t < len(c.users)]
        for i in range(0, len(live), concurrent):
            group = live[i:i + concurrent]
            prompts = [history(c, t) for c in group]
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                [params(c.reply_tokens[t], capture_offsets=[len(c.system)] if system_offsets else None)
                                 for c in group], use_tqdm=False)
            for c, p, out in zip(group, prompts, outs):
                c.turns.append(_turn(out, len(p)))


def conversations(n: int, turns: int, system_prompts: int, seed: int, system_tokens=(300, 700),
                  user_tokens=(20, 120), reply_tokens=(4, 24), vocab: int = 1024) -> list[Conversation]:
    """`n` conversations over `system_prompts` shared system prompts, lengths drawn at random."""
    import random

    r = random.Random(seed)
    systems = [[r.randrange(3, vocab) for _ in range(r.randint(*system_tokens))] for _ in range(system_prompts)]
    return [Conversation(list(systems[i % system_prompts]),
                         [[r.randrange(3, vocab) for _ in range(r.randint(*user_tokens))] for _ in range(turns)],
                         [r.randint(*reply_tokens) for _ in range(turns)]) for i in range(n)]


def fresh(convs: list[Conversation]) -> list[Conversation]:
    """The same conversations with no turn served yet."""
    return [Conversation(c.system, c.users, c.reply_tokens) for c in convs]


def generate_one(llm, prompt, max_tokens: int, lora=None, cache_salt: str | None = None) -> tuple[Turn, tuple]:
    """One request on its own: `prompt` is token ids or a tensor of prompt embeddings [tokens, hidden]; `lora` a
    vLLM LoRARequest. Returns its turn and (token ids, log-probabilities) for comparisons."""
    from vllm.inputs import EmbedsPrompt, TokensPrompt

    if isinstance(prompt, list):
        p, n = TokensPrompt(prompt_token_ids=prompt), len(prompt)
    else:
        p, n = EmbedsPrompt(prompt_embeds=prompt), int(prompt.shape[0])
    if cache_salt is not None:
        p["cache_salt"] = cache_salt
    out = llm.generate([p], [params(max_tokens)], lora_request=lora, use_tqdm=False)[0]
    turn = _turn(out, n)
    return turn, (turn.tokens, turn.logprobs)


def run(model: str, mode: str, convs: list[Conversation], system_offsets: bool = False, concurrent: int = 1, **kw):
    """Serves fresh copies of `convs` on a new engine (`kw` as engine()'s; `system_offsets` and `concurrent` as
    serve()'s); returns them and the connector's metrics (None without it), the cache's invariants checked."""
    import gc

    llm = engine(model, mode, **kw)
    convs = fresh(convs)
    serve(llm, convs, concurrent=concurrent, system_offsets=system_offsets)
    metrics = None
    if mode not in ("off", "vllm"):
        c = connector(llm)
        c.cache.check_invariants()
        metrics = c.metrics()
    del llm
    gc.collect()
    return convs, metrics


def outputs(convs: list[Conversation]) -> list[tuple[list[int], list[float]]]:
    """Every turn's (token ids, log-probabilities), conversation by conversation."""
    return [(t.tokens, t.logprobs) for c in convs for t in c.turns]


def cached(convs: list[Conversation]) -> list[int]:
    """Every turn's cached prompt tokens (vLLM's num_cached_tokens)."""
    return [t.cached_tokens for c in convs for t in c.turns]
