# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.vllm under vLLM's OpenAI API server, as vLLM is run: a tokenizer and chat template (written at test time
next to a random-weight checkpoint), /v1/completions and /v1/chat/completions, stop strings, and Reprise's figures in
/metrics. The server runs vLLM's engine in its own process (vLLM's default), the connector's scheduler side there.

- /metrics carries vllm:reprise_* (counters and gauges), and they move with the requests served;
- a chat conversation's second turn restores the first turn's end (the re-rendered reply extends it);
- a second conversation over a system prompt restores its end at its first turn, with no change to the client (the
  plugin derives the system prompt's end by rendering the system message alone with the server's template);
- a reply ended by a stop string or a stop token id keeps its turn end (the stop string's hold shown necessary on a
  second server without it).
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
    def __init__(self, model, workdir, policy="chat", **options):
        self.port = _port()
        config = {"kv_connector": "RepriseConnector", "kv_connector_module_path": "reprise.vllm.connector",
                  "kv_role": "kv_both", "kv_connector_extra_config": {"policy": policy, **options}}
        self.log_path = os.path.join(workdir, f"server-{policy}-{self.port}.log")
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
def checkpoint(tmp_path_factory):
    model = models.write_granite_hybrid(str(tmp_path_factory.mktemp("granite-chat")))
    return models.write_tokenizer(model)


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    s = Server(checkpoint, str(tmp_path_factory.mktemp("logs")))
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


def _stop_word(reply_words, first=3):
    """The index k of a reply word usable as a stop string that vLLM finds exactly at reply token k: its first
    occurrence in the reply's text is that word (a word such as 'w34' would also be found inside an earlier 'w345')."""
    text = " ".join(reply_words)
    for k in range(first, len(reply_words)):
        if text.find(reply_words[k]) == len(" ".join(reply_words[:k])) + (1 if k else 0):
            return k
    raise AssertionError(f"no usable stop word in {reply_words}")


def _stop_string_turns(server, system_ids, user_ids, by_token_id=False):
    """A conversation whose first reply ends on a stop string, or a stop token id (the reply's k-th word, known from
    the same request run to max_tokens first), then its second turn: (k, reply words, turn-1 prompt tokens, turn 2's
    cached)."""
    messages = [{"role": "system", "content": models.words(system_ids)},
                {"role": "user", "content": models.words(user_ids)}]
    full = server.chat(messages, max_tokens=12)["choices"][0]["message"]["content"].split()
    k = _stop_word(full)
    stop = {"stop_token_ids": [int(full[k][1:])]} if by_token_id else {"stop": [full[k]]}
    first = server.chat(messages, max_tokens=12, **stop)
    reply = first["choices"][0]["message"]["content"].split()
    assert first["choices"][0]["finish_reason"] == "stop" and reply == full[:k]
    n1, _ = _usage(first)
    messages += [{"role": "assistant", "content": " ".join(reply)},
                 {"role": "user", "content": models.words(range(900, 920))}]
    _, cached = _usage(server.chat(messages))
    return k, reply, n1, cached


def test_a_reply_ended_by_a_stop_string_keeps_its_turn_end(server):
    """vLLM's frontend finds a stop string and aborts the request in the engine core, which under the API server has
    stepped on meanwhile. The connector runs vLLM's detokenizer on the reply in the engine core and holds the
    request's next step until the abort arrives, so the state is the turn end: the prompt and every reply token but
    the stop string's. Turn 2 restores exactly that (its prompt extends turn 1's prompt by the reply's k words)."""
    holds = server.metrics().get("vllm:reprise_stop_string_holds_total", 0)
    k, reply, n1, cached = _stop_string_turns(server, range(120, 330), range(520, 560))
    print(f"\nstop string at reply token {k}: turn 1 {n1} prompt tokens + {len(reply)} reply words; turn 2 cached "
          f"{cached}")
    assert cached == n1 + k
    assert server.figure_after("vllm:reprise_stop_string_holds_total", holds + 1) == holds + 1
    assert server.metrics().get("vllm:reprise_stop_string_holds_unconfirmed_total", 0) == 0


def test_a_reply_ended_by_a_stop_token_id_keeps_its_turn_end(server):
    """A stop token id (as an EOS) stops the request in the engine core, after the step that sampled it: the state
    holds the prompt and the reply before it, and turn 2 restores exactly that."""
    k, reply, n1, cached = _stop_string_turns(server, range(130, 340), range(530, 570), by_token_id=True)
    print(f"\nstop token id at reply token {k}: turn 2 cached {cached}")
    assert cached == n1 + k


def test_without_the_hold_a_stop_string_loses_the_turn_end(checkpoint, tmp_path_factory):
    """The same conversation on a server whose connector does not hold (stop_string_wait_s = 0): the engine core has
    fed tokens past the reply by the time the abort arrives, so turn 2 restores an earlier snapshot."""
    s = Server(checkpoint, str(tmp_path_factory.mktemp("logs-nohold")), stop_string_wait_s=0)
    try:
        k, reply, n1, cached = _stop_string_turns(s, range(120, 330), range(520, 560))
    finally:
        s.stop()
    print(f"\nno hold: stop string at reply token {k}: turn 2 cached {cached} of {n1 + k}")
    assert cached < n1 + k
