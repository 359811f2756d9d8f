# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Python-side cost of one admit + commit + release + step_complete, the loop of bench/bench_prefix_cache.cpp
(BM_cache) driven from Python: the same 32-layer attention model (block_sharing, B = 16, kv_blocks = 4x the
prompt's blocks, 4 sequences, hasher seed 11), the same prompts, the same 0 / 50 / 100 % prefix hit.

Prints CPU microseconds per operation (median of the repetitions; the machine may be shared, so wall time
would include waiting). The prompt is an int32 numpy array (read without a copy); `--list` also times the same
prompt passed as a Python list (converted by numpy on every call).

    PYTHONPATH=build/python/package python3 python/bench/bench_overhead.py --tokens 1024 32768
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import reprise

B = 16


def base_prompt(tokens: int) -> np.ndarray:
    return (np.arange(tokens, dtype=np.uint64) * 2654435761 % 151936).astype(np.int32)


def measure(tokens: int, hit: int, min_time: float, as_list: bool) -> float:
    """CPU microseconds per admit + commit + release + step_complete, over at least `min_time` seconds."""
    config = reprise.ModelConfig.preset("llama-3-8b")
    cache = reprise.PrefixCache(config, "block_sharing", kv_blocks=4 * (tokens // B + 1), max_sequences=4,
                                hasher_seed=11)
    prompt = base_prompt(tokens)
    cache.admit(0, prompt)
    cache.commit(0, tokens)
    cache.release(0)
    shared = tokens if hit == 100 else tokens * hit // 100 // B * B
    seq = 1

    def one():
        nonlocal seq
        if shared < tokens:
            prompt[shared] = 200000 + seq % 1000000000  # tokens no earlier iteration used
        plan = cache.admit(seq, prompt.tolist() if as_list else prompt)
        cache.commit(seq, tokens)
        cache.release(seq)
        cache.step_complete(cache.current_epoch())
        seq += 1
        return plan

    for _ in range(6):  # warm-up, as the C++ benchmark: the pool cycles once
        one()
    assert one().kv_matched_tokens == min(shared, (tokens - 1) // B * B)
    n, spent = 0, 0.0
    while spent < min_time:
        batch = max(1, n)
        convert = 0.0
        start = time.process_time()
        for _ in range(batch):
            one()
        spent += time.process_time() - start
        n += batch
        if as_list:  # the list is built inside the timed loop: take its construction out again
            start = time.process_time()
            for _ in range(batch):
                prompt.tolist()
            convert = time.process_time() - start
            spent -= convert
    return spent / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 32768])
    parser.add_argument("--hits", type=int, nargs="+", default=[0, 50, 100])
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds per repetition")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--list", action="store_true", help="also pass the prompt as a Python list")
    args = parser.parse_args()
    print(f"{'tokens':>7} {'hit%':>5} {'input':>6} {'cpu us/op (median)':>19}   repetitions")
    for tokens in args.tokens:
        for hit in args.hits:
            for as_list in (False, True) if args.list else (False,):
                runs = [measure(tokens, hit, args.min_time, as_list) for _ in range(args.repetitions)]
                print(f"{tokens:>7} {hit:>5} {'list' if as_list else 'numpy':>6} {statistics.median(runs):>19.2f}   "
                      + " ".join(f"{r:.2f}" for r in runs))


if __name__ == "__main__":
    main()
