# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""mlx-lm's HTTP server with Reprise's prompt cache in the place of its LRUPromptCache.

    python -m reprise.mlx.server --reprise chat --model DIR [--reprise-kv-budget 2GiB]
        [--reprise-snapshot-budget 2GiB] [--reprise-block-size 16] [--reprise-max-sequences 64]
        [--reprise-model-revision NAME] [any mlx_lm.server option]

``--reprise off`` runs mlx-lm's server as it is (its LRUPromptCache), for side by sides. The options are checked
before the model loads, with the checkpoint's config.json: an error names the option and what to change. Besides
mlx-lm's API, ``GET /reprise/metrics`` returns Reprise's figures as JSON (prompt tokens, skipped, restores,
captures, the last request's plan); the response's ``usage.prompt_tokens_details.cached_tokens`` is the tokens
Reprise skipped."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import mlx_lm
import mlx_lm.server as mlx_server
from mlx_lm.utils import load_model

from . import MLX_LM_VERSION
from .prompt_cache import DEFAULTS, PromptCache, check_layout, check_options, model_config

logger = logging.getLogger("reprise.mlx")


class VersionMismatch(RuntimeError):
    pass


def check_mlx_lm_version(version: str) -> None:
    if version != MLX_LM_VERSION:
        raise VersionMismatch(f"reprise.mlx is tested against mlx-lm {MLX_LM_VERSION} (the server's internals it "
                              f"relies on: segment ends, the prompt cache calls); this is mlx-lm {version}")


class RepriseResponseGenerator(mlx_server.ResponseGenerator):
    """mlx-lm's response generator whose prompt segments end where Reprise plans them: [0, u) (skipped), then a
    segment per capture position, then the rest. The server ends a prefill at each segment end and passes the
    state there to the prompt cache's insert_cache; that is where Reprise's captures are written."""

    def _tokenize(self, tokenizer, request, args):
        prompt, segments, segment_types, initial_state, vision = super()._tokenize(tokenizer, request, args)
        if vision is not None:   # images: mlx-lm keys these by media, Reprise is not told about them
            return prompt, segments, segment_types, initial_state, vision
        # mlx-lm's own system-prompt end (the leading system messages rendered alone, the common token prefix).
        system_end = len(segments[0]) if segment_types and segment_types[0] == "system" else 0
        provider = self.model_provider
        stops = self.prompt_cache.plan(provider.model, provider.model_key, list(prompt), system_end)
        if stops is None:
            return prompt, [prompt], ["assistant"], initial_state, vision
        bounds = [0] + [p for p in stops if 0 < p < len(prompt)] + [len(prompt)]
        pieces = [prompt[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        # One type per piece but the last: the server calls insert_cache at the end of each typed piece (the last
        # piece's end is the prompt's end, reached through the reply's turn end instead).
        return prompt, pieces, ["user"] * (len(pieces) - 1) + ["assistant"], initial_state, vision


class RepriseBatchGenerator(mlx_server.BatchGenerator):
    """mlx-lm's batch generator that keeps each request's Reprise sequence under the request's id, so that a request
    the server drops before its end (``remove``: its client closed the connection), for which the server calls no
    prompt cache method, still ends its sequence (PromptCache.abandon). `prompt_cache` is set on a subclass made per
    server."""

    prompt_cache: PromptCache

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._sequences: dict[int, object] = {}   # request id -> its sequence, until the request ends or is removed

    def insert_segments(self, *args, **kwargs):
        uids = super().insert_segments(*args, **kwargs)
        seq = self.prompt_cache.take_fetched()   # the server fetched this request's cache just before
        if seq is not None and len(uids) == 1:
            self._sequences[uids[0]] = seq
        return uids

    def next(self):
        prompt_responses, generation_responses = super().next()
        for r in generation_responses:
            if r.finish_reason is not None:   # the server hands its end to insert_cache
                self._sequences.pop(r.uid, None)
        return prompt_responses, generation_responses

    def remove(self, uids, return_prompt_caches=False):
        tracked = {uid: self._sequences.pop(uid) for uid in uids if uid in self._sequences}
        # The dropped requests' states as they are, so that what they computed can still be cached.
        caches = super().remove(uids, return_prompt_caches=return_prompt_caches or bool(tracked))
        for uid, seq in tracked.items():
            cache, tokens = caches.get(uid, (None, None))
            self.prompt_cache.abandon(seq, None if tokens is None else list(tokens), cache)
        return caches if return_prompt_caches else {}


class RepriseHandler(mlx_server.APIHandler):
    """mlx-lm's request handler plus GET /reprise/metrics."""

    def do_GET(self):
        if self.path == "/reprise/metrics":
            body = json.dumps(self.response_generator.prompt_cache.metrics()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def _size(text: str) -> int:
    units = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
    t = text.strip().lower()
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    if unit not in units or not num:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (bytes, or a number with K, M, G, KiB, MiB, GiB)")
    return int(float(num) * units[unit])


def reprise_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reprise.mlx.server", add_help=False,
                                description="mlx-lm's server with Reprise's prompt cache "
                                            "(other options: mlx_lm.server's)")
    p.add_argument("--reprise", required=True, choices=["chat", "strict", "off"],
                   help="Reprise's policy for hybrid models (attention-only models use block_sharing); "
                        "'off': mlx-lm's own LRUPromptCache")
    p.add_argument("--reprise-kv-budget", type=_size, default=DEFAULTS["kv_budget_bytes"])
    p.add_argument("--reprise-snapshot-budget", type=_size, default=DEFAULTS["snapshot_budget_bytes"])
    p.add_argument("--reprise-block-size", type=int, default=DEFAULTS["block_size"])
    p.add_argument("--reprise-max-sequences", type=int, default=DEFAULTS["max_sequences"])
    p.add_argument("--reprise-hasher-seed", type=int, default=None)
    p.add_argument("--reprise-model-revision", type=str, default=None,
                   help="the name of the weights in Reprise's keys (default: a digest of config.json and the weight "
                        "files' names, sizes and times)")
    p.add_argument("--reprise-check-invariants", action="store_true",
                   help="verify Reprise's bookkeeping after every request (slow; for tests)")
    return p


def _refuse(message: str) -> None:
    print(f"reprise.mlx.server: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_mlx_lm_version(mlx_lm.__version__)
    except VersionMismatch as e:
        _refuse(str(e))
    ours, rest = reprise_parser().parse_known_args(argv)
    if ours.reprise == "off":
        sys.argv = ["mlx_lm.server"] + rest
        mlx_server.main()
        return
    options = {"policy": ours.reprise, "kv_budget_bytes": ours.reprise_kv_budget,
               "snapshot_budget_bytes": ours.reprise_snapshot_budget, "block_size": ours.reprise_block_size,
               "max_sequences": ours.reprise_max_sequences, "hasher_seed": ours.reprise_hasher_seed,
               "model_revision": ours.reprise_model_revision, "check_invariants": ours.reprise_check_invariants}
    try:
        options = check_options(options)
    except ValueError as e:
        _refuse(str(e))
    mlx_args = _mlx_args(rest)
    # What Reprise replaces or cannot see: refused here rather than served wrong.
    if mlx_args.model is None:
        _refuse("--model DIR is required with --reprise (Reprise reads the checkpoint's config.json at start)")
    if mlx_args.prompt_cache_bytes is not None:
        _refuse("--prompt-cache-bytes sizes mlx-lm's LRUPromptCache, which Reprise replaces: use "
                "--reprise-kv-budget and --reprise-snapshot-budget")
    if mlx_args.kv_bits is not None:
        _refuse("--kv-bits (quantized KV cache) is not supported with --reprise: Reprise's pools hold full-precision "
                "KV blocks")
    if mlx_args.draft_model is not None:
        _refuse("--draft-model is not supported with --reprise: the draft model's caches are not Reprise's")
    config_path = Path(mlx_args.model) / "config.json"
    if not config_path.is_file():
        _refuse(f"--model {mlx_args.model}: no config.json there (Reprise serves local model directories)")
    try:
        cfg = model_config(json.loads(config_path.read_text()), options["block_size"])
    except Exception as e:   # the binding's errors name the config rule broken
        _refuse(f"--model {mlx_args.model}: Reprise cannot read this checkpoint's layers: {e}")
    try:
        # The model built lazily (its weights mapped, never evaluated) for the cache list mlx-lm will make for it:
        # each cache must be of a kind Reprise holds, as many of each kind as Reprise reads in config.json.
        layers, _ = load_model(Path(mlx_args.model), lazy=True, trust_remote_code=mlx_args.trust_remote_code)
    except Exception as e:
        _refuse(f"--model {mlx_args.model}: mlx-lm cannot load this checkpoint: {e}")
    try:
        check_layout(layers, cfg)
    except ValueError as e:
        _refuse(f"--model {mlx_args.model}: {e}")
    del layers
    if cfg.bytes_per_snapshot and options["snapshot_budget_bytes"] < cfg.bytes_per_snapshot:
        _refuse(f"--reprise-snapshot-budget {options['snapshot_budget_bytes']} bytes holds no snapshot of this "
                f"model ({cfg.bytes_per_snapshot} bytes each)")
    if options["kv_budget_bytes"] < cfg.bytes_per_kv_block:
        _refuse(f"--reprise-kv-budget {options['kv_budget_bytes']} bytes holds no KV block of this model "
                f"({cfg.bytes_per_kv_block} bytes each)")

    def run(host, port, model_provider, server_class=mlx_server.ThreadingHTTPServer,
            handler_class=mlx_server.APIHandler):
        import mlx.core as mx

        if mx.distributed.init().size() > 1:
            _refuse("distributed serving is not supported with --reprise")
        cache = PromptCache(**options)
        # The server's generation thread builds its batch generators by this module-level name.
        mlx_server.BatchGenerator = type("RepriseBatchGenerator", (RepriseBatchGenerator,), {"prompt_cache": cache})
        generator = RepriseResponseGenerator(model_provider, cache)
        logger.info("reprise.mlx: prompt cache: Reprise, policy %s (hybrid models), budgets %d B KV, %d B snapshots",
                    options["policy"], options["kv_budget_bytes"], options["snapshot_budget_bytes"])
        mlx_server._run_http_server(host, port, generator, server_class=server_class, handler_class=RepriseHandler)

    sys.argv = ["mlx_lm.server"] + rest
    mlx_server.run = run   # main() parses mlx-lm's own options, then calls run(host, port, ModelProvider(args))
    mlx_server.main()


def _mlx_args(rest: list[str]) -> argparse.Namespace:
    """mlx-lm's own options, parsed the way its main() will (its parser is built inside main, so run it with
    parse_args stopped before the model loads)."""
    captured = {}

    class _Stop(Exception):
        pass

    def fake_run(host, port, model_provider, *a, **k):
        raise _Stop

    original_run, original_provider = mlx_server.run, mlx_server.ModelProvider
    saved_argv = sys.argv
    try:
        mlx_server.run = fake_run
        mlx_server.ModelProvider = lambda args: captured.setdefault("args", args)
        sys.argv = ["mlx_lm.server"] + rest
        try:
            mlx_server.main()
        except _Stop:
            pass
    finally:
        mlx_server.run, mlx_server.ModelProvider = original_run, original_provider
        sys.argv = saved_argv
    return captured["args"]


if __name__ == "__main__":
    main()
