# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""mlx-lm servers started for the tests (with Reprise, or mlx-lm's own for references) and an HTTP client, plus a
reference session driven in-process with mlx-lm's own BatchGenerator."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process. `args`: the launcher's options after the module (for reprise.mlx.server) or mlx-lm's
    (module 'mlx_lm' with 'server' first)."""

    def __init__(self, args: list[str], log: Path, module: str = "reprise.mlx.server", script: Path | None = None,
                 wait: bool = True):
        self.port = free_port()
        cmd = [sys.executable] + ([str(script)] if script else ["-m", module]) + args + ["--port", str(self.port)]
        self.log = log
        self._out = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=dict(os.environ))
        self._started = time.time()
        self._up = False
        if wait:
            self.wait()

    def wait(self) -> "Server":
        """Returns once the server answers /health (started with wait=False, it starts beside other work)."""
        if self._up:
            return self
        log = self.log
        deadline = self._started + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.time() > deadline:
                self.close()
                raise RuntimeError(f"server did not start:\n{log.read_text()}")
            time.sleep(0.1)
        self._up = True
        return self

    def chat(self, messages: list[dict], max_tokens: int = 12, **fields) -> dict:
        """Greedy, with the chosen tokens' ids and log-probabilities (mlx-lm's `logprobs: true`); `fields` go into
        the request body as they are."""
        body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
                           "logprobs": True, **fields}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            out = json.load(r)
        choice = out["choices"][0]
        content = choice.get("logprobs", {}).get("content", [])
        return {"text": choice["message"]["content"] or "", "ids": [c["id"] for c in content],
                "logprobs": [c["logprob"] for c in content], "finish": choice["finish_reason"],
                "prompt_tokens": out["usage"]["prompt_tokens"],
                "cached": out["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)}

    def abandon(self, messages: list[dict], chunks: int = 3, max_tokens: int = 2000, **fields) -> None:
        """A streamed request whose client reads `chunks` chunks of the reply and closes the connection; the special
        tokens are biased away so that the reply would run to `max_tokens` (seconds) if the server did not notice."""
        body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                           "logit_bias": {str(i): -1e9 for i in range(3)}, **fields}).encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            stream = sock.makefile("rb")
            seen = 0
            while seen < chunks:
                line = stream.readline()
                assert line, "the stream ended before the client closed it"
                seen += line.startswith(b"data: {")
            stream.close()
            sock.shutdown(socket.SHUT_RDWR)

    def metrics(self) -> dict:
        """Reprise's figures once every request answered so far has finished in the cache too (the server answers
        a request before it hands the request's end to the prompt cache)."""
        deadline = time.time() + 30
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/reprise/metrics", timeout=10) as r:
                m = json.load(r)
            if m["finished"] + m["untracked"] >= m["requests"] or time.time() > deadline:
                return m
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


class ModelView:
    """One model on a server that serves several: each request names the model (mlx-lm loads the one a request
    names, a test checkpoint in tens of milliseconds), and the Reprise figures count from the view's making (a test
    makes its own), with only this model's PrefixCache metrics."""

    COUNTERS = ("requests", "finished", "prompt_tokens", "skipped_tokens", "kv_matched_tokens", "restores",
                "captures", "turn_end_captures", "untracked", "abandoned", "restore_copy_s", "capture_copy_s")

    def __init__(self, server: Server, model: Path, reprise: bool):
        self.server, self.model = server.wait(), str(model)
        self._base = {k: server.metrics()[k] for k in self.COUNTERS} if reprise else {}

    def chat(self, messages: list[dict], max_tokens: int = 12, **fields) -> dict:
        return self.server.chat(messages, max_tokens, model=self.model, **fields)

    def abandon(self, messages: list[dict], **options) -> None:
        self.server.abandon(messages, model=self.model, **options)

    def metrics(self) -> dict:
        m = self.server.metrics()
        m.update({k: m[k] - self._base[k] for k in self.COUNTERS})
        m["models"] = {k: v for k, v in m["models"].items() if k == self.model}
        return m


def start(kind: str, model: Path, log_dir: Path, extra: list[str] | None = None,
          check_invariants: bool = True, wait: bool = True) -> Server:
    """'off': mlx-lm's own server with its prompt cache holding nothing (caching off); 'lru': mlx-lm's own
    LRUPromptCache as it comes; 'chat' / 'strict': with Reprise; 'faulty-strict': Reprise with perturbed snapshots."""
    extra = extra or []
    log = log_dir / f"{model.name}-{kind}.log"
    if kind == "off":
        return Server(["server", "--model", str(model), "--prompt-cache-size", "0"] + extra, log, module="mlx_lm",
                      wait=wait)
    if kind == "lru":
        return Server(["server", "--model", str(model)] + extra, log, module="mlx_lm", wait=wait)
    checked = ["--reprise-check-invariants"] if check_invariants else []
    if kind == "faulty-strict":
        return Server(["--reprise", "strict", "--model", str(model)] + checked + extra, log,
                      script=HERE / "faulty_server.py", wait=wait)
    return Server(["--reprise", kind, "--model", str(model)] + checked + extra, log, wait=wait)


class Session:
    """A conversation that never stops, in-process: mlx-lm's BatchGenerator (the server's own prefill and decode
    loop), greedy, one cache object carried from turn to turn. Each turn's prompt is prefilled in the given pieces
    (where the server's prefill stopped) and must extend everything the session has seen."""

    def __init__(self, model_dir: Path):
        from mlx_lm import load

        self.model, self.tokenizer = load(str(model_dir))
        self.cache = None
        self.tokens: list[int] = []

    def turn(self, prompt: list[int], stops: list[int], max_tokens: int) -> dict:
        from mlx_lm.generate import BatchGenerator, make_stop_sequences
        from mlx_lm.sample_utils import make_sampler

        assert prompt[:len(self.tokens)] == self.tokens, "the prompt does not extend the session"
        start = len(self.tokens)
        bounds = [start] + [p for p in stops if start < p < len(prompt)] + [len(prompt)]
        pieces = [prompt[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        gen = BatchGenerator(self.model)
        gen.insert_segments([pieces], max_tokens=[max_tokens], caches=[self.cache],
                            all_tokens=[list(self.tokens)], samplers=[make_sampler(0.0)],
                            stop_sequences=[make_stop_sequences(self.tokenizer, [])])
        ids, logprobs = [], []
        while True:
            _, responses = gen.next()
            done = False
            for r in responses:
                ids.append(r.token)
                logprobs.append(r.logprobs[r.token].item())
                if r.finish_reason is not None:
                    self.cache, self.tokens, done = r.prompt_cache, list(r.all_tokens), True
            if done:
                break
        gen.close()
        return {"ids": ids, "logprobs": logprobs}
