# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.vllm under vLLM's OpenAI API server, as vLLM is run: a tokenizer and chat template (written at test time
next to a random-weight checkpoint), /v1/completions and /v1/chat/completions, stop strings, and Reprise's figures in
/metrics. The server runs vLLM's engine in its own process (vLLM's default), the connector's scheduler side there.

- /metrics carries vllm:reprise_* (counters and gauges), and they move with the requests served;
- a chat conversation's second turn restores the first turn's end (the re-rendered reply extends it);
- a second conversation over a system prompt restores its end at its first turn, with no change to the client (the
  plugin derives the system prompt's end by rendering the system message alone with the server's template).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import models

REPLY_IDS = list(range(len(models.SPECIALS), models.VOCAB))   # replies of words only: their text re-tokenizes alike


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model, workdir, policy="chat"):
        self.port = _port()
        config = {"kv_connector": "RepriseConnector", "kv_connector_module_path": "reprise.vllm.connector",
                  "kv_role": "kv_both", "kv_connector_extra_config": {"policy": policy}}
        self.log_path = os.path.join(workdir, f"server-{policy}.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)   # as vLLM is run: the engine in a process of its own
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port", str(self.port),
             "--host", "127.0.0.1", "--dtype", "float32", "--max-model-len", "4096", "--max-num-seqs", "4",
             "--kv-cache-memory-bytes", str(1 << 30), "--seed", "0", "--no-enable-prefix-caching",
             "--no-async-scheduling", "--enable-prompt-tokens-details", "--kv-transfer-config", json.dumps(config)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}; see {self.log_path}:\n"
                                   + open(self.log_path).read()[-3000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            raise RuntimeError(f"the server did not start; see {self.log_path}")
        self.model = model

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def complete(self, prompt, max_tokens=8, **kw):
        return self.post("/v1/completions", {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                             "temperature": 0, "allowed_token_ids": REPLY_IDS, **kw})

    def chat(self, messages, max_tokens=8, **kw):
        return self.post("/v1/chat/completions", {"model": self.model, "messages": messages,
                                                  "max_tokens": max_tokens, "temperature": 0,
                                                  "allowed_token_ids": REPLY_IDS, **kw})

    def metrics(self):
        """vllm:reprise_* -> value (summed over label sets)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("vllm:reprise_") and not line.split("{")[0].endswith("_created"):
                name, value = line.split("{")[0], float(line.rsplit(" ", 1)[1])
                out[name] = out.get(name, 0) + value
        return out

    def figure_after(self, name, at_least, timeout=30):
        """The metric once it reaches `at_least` (vLLM publishes an interval's stats after the step)."""
        deadline = time.time() + timeout
        while True:
            value = self.metrics().get(name, 0)
            if value >= at_least or time.time() > deadline:
                return value
            time.sleep(0.5)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = models.write_granite_hybrid(str(tmp_path_factory.mktemp("granite-chat")))
    models.write_tokenizer(model)
    s = Server(model, str(tmp_path_factory.mktemp("logs")))
    yield s
    s.stop()


def _usage(r):
    u = r["usage"]
    return u["prompt_tokens"], (u.get("prompt_tokens_details") or {}).get("cached_tokens")


def test_metrics_carry_reprise_figures(server):
    before = server.metrics()
    assert "vllm:reprise_skipped_tokens_total" in before and "vllm:reprise_snapshot_pool_bytes" in before
    prompt = models.words(range(10, 410))
    reply = server.complete(prompt)["choices"][0]["text"]
    server.complete(prompt + " " + reply + " w7 w8")   # the next turn: restores the first one's end
    skipped = server.figure_after("vllm:reprise_skipped_tokens_total", before.get(
        "vllm:reprise_skipped_tokens_total", 0) + 1)
    after = server.metrics()
    print(f"\n/metrics: { {k: v for k, v in after.items() if v} }")
    assert skipped > before.get("vllm:reprise_skipped_tokens_total", 0)
    assert after["vllm:reprise_prompt_tokens_total"] >= before.get("vllm:reprise_prompt_tokens_total", 0) + 800
    assert after["vllm:reprise_snapshot_restores_total"] >= 1 and after["vllm:reprise_snapshot_bytes_held"] > 0
    assert after["vllm:reprise_snapshot_pool_bytes"] >= after["vllm:reprise_snapshot_bytes_held"]
    assert after["vllm:reprise_kv_pool_bytes"] >= after["vllm:reprise_kv_bytes_held"] > 0


def test_chat_turn_two_restores_turn_one_end(server):
    messages = [{"role": "system", "content": models.words(range(100, 340))},
                {"role": "user", "content": models.words(range(500, 540))}]
    first = server.chat(messages)
    reply = first["choices"][0]["message"]["content"]
    n1, _ = _usage(first)
    replied = len(reply.split())
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": models.words(range(600, 620))}]
    second = server.chat(messages)
    n2, cached = _usage(second)
    print(f"\nchat: turn 1 {n1} prompt tokens + {replied} reply tokens; turn 2 {n2} prompt tokens, {cached} cached")
    # the turn end: turn 1's prompt and reply but its last token (sampled, never fed)
    assert cached == n1 + replied - 1


def test_a_second_conversation_restores_the_system_prompt_at_its_first_meeting(server):
    """No kv_transfer_params from the client: the plugin renders the system message alone with the chat template
    and passes where the prompts agree (the end of "<|system|> ...", 1 + 281 tokens) as the capture offset, so the
    first conversation's prefill is split and snapshotted there and the second conversation's first turn restores
    it, rounded down to Reprise's block size (without the offset, chat restores a shared system prompt only from
    the third conversation on). A third, with another system prompt of the same length, restores nothing."""
    from reprise.vllm import DEFAULTS

    system = models.words(range(700, 981))
    first = server.chat([{"role": "system", "content": system},
                         {"role": "user", "content": models.words(range(6, 40))}])
    second = server.chat([{"role": "system", "content": system},
                          {"role": "user", "content": models.words(range(40, 90))}])
    other = server.chat([{"role": "system", "content": models.words(range(300, 581))},
                         {"role": "user", "content": models.words(range(40, 90))}])
    end = (1 + 281) // DEFAULTS["block_size"] * DEFAULTS["block_size"]
    print(f"\nchat API, no client change: first conversation {_usage(first)}, second {_usage(second)}, "
          f"another system prompt {_usage(other)} (prompt tokens, cached)")
    assert _usage(first)[1] == 0 and _usage(second)[1] == end and _usage(other)[1] == 0
