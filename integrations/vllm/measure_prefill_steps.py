# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Measures where vLLM's own kernels give a prompt other last bits when its prefill is cut into other steps: caching
off (no connector) on the tests' fp32 GraniteMoeHybrid checkpoint, each prompt length computed with chunked prefill
at each budget, compared with the reference budget (greedy tokens and log-probabilities, exactly). Asserts nothing;
docs/vllm.md ("Where a prefill step ends") quotes its output.

    PYTHONPATH=<build>/python/package .deps/vllm/venv/bin/python integrations/vllm/measure_prefill_steps.py \\
        --budgets 8192,512,736 --reference 64 --lengths 640:1200:16
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import models  # noqa: E402


def outputs_by_length(model: str, budget: int, prompt: list[int], lengths: list[int], max_tokens: int):
    llm = harness.engine(model, "off", engine_args={"max_num_batched_tokens": budget})
    out = [harness.generate_one(llm, prompt[:n], max_tokens)[1] for n in lengths]
    del llm
    gc.collect()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="8192,512,736", help="max_num_batched_tokens values to compare")
    ap.add_argument("--reference", type=int, default=64, help="the budget the others are compared with")
    ap.add_argument("--lengths", default="640:1200:16", help="prompt lengths, start:stop:step")
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    start, stop, step = (int(x) for x in args.lengths.split(":"))
    lengths = list(range(start, stop, step))
    rng = random.Random(args.seed)
    prompt = [rng.randrange(3, 1024) for _ in range(lengths[-1])]
    with tempfile.TemporaryDirectory() as tmp:
        model = models.write_granite_hybrid(tmp)
        ref = outputs_by_length(model, args.reference, prompt, lengths, args.max_tokens)
        for budget in (int(b) for b in args.budgets.split(",")):
            got = outputs_by_length(model, budget, prompt, lengths, args.max_tokens)
            alike = [a == b for a, b in zip(got, ref)]
            first = next((n for n, e in zip(lengths, alike) if not e), None)
            print(f"budget {budget} vs {args.reference}: equal on {sum(alike)} of {len(alike)} lengths; first "
                  f"differing length {first}; differing: {[n for n, e in zip(lengths, alike) if not e]}", flush=True)


if __name__ == "__main__":
    main()
