# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""A tiny hybrid language model in numpy: one attention, one Mamba2 and one gated-delta layer.

The recurrent layers call Reprise's host kernels (``reprise.ops``) on engine-owned slot pools; attention reads
and writes a paged KV pool through a block table. Every per-token computation is independent of how many
tokens are computed together (fixed reduction order per token), so a prefill resumed from a cached prefix
produces the same bits as a cold one. That is the rule an engine must follow for Reprise's bit-exact hits.
"""

from __future__ import annotations

import numpy as np

import reprise
from reprise import ops

F32 = np.float32
VOCAB, D, BLOCK = 97, 32, 16
ATT_HEADS, ATT_DIM = 2, 16
M_HEADS, M_DIM, M_STATE, M_GROUPS, CONV_W, CHUNK = 4, 8, 16, 1, 4, 64
G_HEADS, G_KDIM, G_VDIM = 2, 16, 16
M_CONV = M_HEADS * M_DIM + 2 * M_GROUPS * M_STATE  # x, B, C through the conv
G_CONV = 2 * G_HEADS * G_KDIM + G_HEADS * G_VDIM   # q, k, v through the conv


def model_config() -> reprise.ModelConfig:
    """The cache's view of this model: its stateful layers (fp32 conv windows, as the pools below hold)."""
    return reprise.ModelConfig([
        (reprise.KvShape(kv_heads=ATT_HEADS, head_dim=ATT_DIM, block_size=BLOCK, dtype="f32"), 1),
        (reprise.Mamba2Shape(heads=M_HEADS, head_dim=M_DIM, state_dim=M_STATE, groups=M_GROUPS, conv_width=CONV_W,
                             chunk=CHUNK, conv_dtype="f32"), 1),
        (reprise.GatedDeltaShape(key_heads=G_HEADS, value_heads=G_HEADS, key_dim=G_KDIM, value_dim=G_VDIM,
                                 conv_width=CONV_W, chunk=CHUNK, conv_dtype="f32"), 1),
    ])


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x [rows, in] @ w [in, out], each output summed over `in` in the same order whatever the row count
    (a BLAS GEMM may block rows differently for different batch sizes)."""
    return (x[:, :, None] * w[None, :, :]).sum(axis=1, dtype=F32)


def rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + F32(1e-5)) * w).astype(F32)


class Memory:
    """Engine-owned state: the paged KV pool (by block id) and the recurrent slot pools (by slot)."""

    def __init__(self, kv_blocks: int, slots: int):
        self.k = np.zeros((kv_blocks, BLOCK, ATT_HEADS, ATT_DIM), F32)
        self.v = np.zeros_like(self.k)
        self.m_conv = np.zeros((slots, CONV_W - 1, M_CONV), F32)
        self.m_ssm = np.zeros((slots, M_HEADS, M_DIM, M_STATE), F32)
        self.g_conv = np.zeros((slots, CONV_W - 1, G_CONV), F32)
        self.g_state = np.zeros((slots, G_HEADS, G_KDIM, G_VDIM), F32)

    def kv_pools(self) -> list[np.ndarray]:
        """The attention pools, by block id."""
        return [self.k, self.v]

    def state_pools(self) -> list[np.ndarray]:
        """The recurrent pools, by slot."""
        return [self.m_conv, self.m_ssm, self.g_conv, self.g_state]

    def copy_slots(self, pairs) -> None:
        """Snapshot restore / save: one batched copy over every recurrent pool."""
        ops.copy_units(self.state_pools(), np.asarray(pairs, np.int32))

    def copy_blocks(self, pairs) -> None:
        """KV copy on write: one batched copy over the attention pools."""
        ops.copy_units(self.kv_pools(), np.asarray(pairs, np.int32))


class TinyHybrid:
    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        w = lambda *shape, s=0.3: (rng.standard_normal(shape) * s).astype(F32)  # noqa: E731
        self.embed, self.head = w(VOCAB, D, s=1.0), w(D, VOCAB)
        self.norms = [np.ones(D, F32) for _ in range(4)]
        self.att_qkv, self.att_out = w(D, 3 * ATT_HEADS * ATT_DIM), w(ATT_HEADS * ATT_DIM, D)
        self.m_in, self.m_conv_w, self.m_out = w(D, M_CONV + M_HEADS), w(M_CONV, CONV_W), w(M_HEADS * M_DIM, D)
        # Slow decays (|A| ~ 0.02): states remember the whole prompt, so a wrong restore would show in the output.
        self.m_A, self.m_D, self.m_dt_bias = -np.exp(w(M_HEADS) - 4), w(M_HEADS), w(M_HEADS)
        self.g_in, self.g_conv_w, self.g_out = w(D, G_CONV + 2 * G_HEADS), w(G_CONV, CONV_W), w(G_HEADS * G_VDIM, D)
        self.g_A_log, self.g_dt_bias = w(G_HEADS) - 4, w(G_HEADS)

    def forward(self, tokens, start: int, table: np.ndarray, kv_from: int, live: int, mem: Memory,
                captures: np.ndarray | None = None, decode: bool = False) -> np.ndarray:
        """Runs `tokens` (absolute positions start, start + 1, ...) of one sequence; returns the last token's
        logits. KV is written at positions >= kv_from (earlier ones are shared cached blocks); the recurrent
        state advances in slot `live`, and prefill writes it into each (position, slot) of `captures`."""
        h = self.embed[np.asarray(tokens)]
        h = h + self.attention(rms_norm(h, self.norms[0]), start, table, kv_from, mem)
        caps = None if captures is None or len(captures) == 0 else \
            np.column_stack([np.zeros(len(captures), np.int64), captures]).astype(np.int64)
        h = h + self.mamba2(rms_norm(h, self.norms[1]), start, live, mem, caps, decode)
        h = h + self.gated_delta(rms_norm(h, self.norms[2]), start, live, mem, caps, decode)
        return linear(rms_norm(h[-1:], self.norms[3]), self.head)[0]

    def attention(self, x, start, table, kv_from, mem):
        n = len(x)
        q, k, v = np.split(linear(x, self.att_qkv).reshape(n, 3, ATT_HEADS, ATT_DIM), 3, axis=1)
        for i, p in enumerate(range(start, start + n)):
            if p >= kv_from:  # shared blocks already hold these bits
                mem.k[table[p // BLOCK], p % BLOCK], mem.v[table[p // BLOCK], p % BLOCK] = k[i, 0], v[i, 0]
        keys = mem.k[table].reshape(-1, ATT_HEADS, ATT_DIM)
        values = mem.v[table].reshape(-1, ATT_HEADS, ATT_DIM)
        out = np.empty((n, ATT_HEADS, ATT_DIM), F32)
        for i, p in enumerate(range(start, start + n)):  # causal: token p sees positions 0..p
            s = (keys[: p + 1] * q[i, 0]).sum(-1) / F32(np.sqrt(ATT_DIM))
            e = np.exp(s - s.max(0))
            out[i] = ((e / e.sum(0))[:, :, None] * values[: p + 1]).sum(0)
        return linear(out.reshape(n, -1), self.att_out)

    def mamba2(self, x, start, live, mem, caps, decode):
        n = len(x)
        proj = linear(x, self.m_in)
        xbc, dt = proj[:, :M_CONV], np.ascontiguousarray(proj[:, M_CONV:])
        conv = np.empty_like(xbc)
        self.conv(xbc, self.m_conv_w, mem.m_conv, conv, start, live, caps, decode)
        xs = np.ascontiguousarray(conv[:, : M_HEADS * M_DIM].reshape(n, M_HEADS, M_DIM))
        B = np.ascontiguousarray(conv[:, M_HEADS * M_DIM: M_HEADS * M_DIM + M_STATE].reshape(n, M_GROUPS, M_STATE))
        C = np.ascontiguousarray(conv[:, M_HEADS * M_DIM + M_STATE:].reshape(n, M_GROUPS, M_STATE))
        y = np.empty_like(xs)
        if decode:
            ops.mamba2_state_update(xs, dt, self.m_A, B, C, mem.m_ssm, y, np.array([[live, live]], np.int32),
                                    D=self.m_D, dt_bias=self.m_dt_bias)
        else:
            ops.mamba2_ssd_prefill(xs, dt, self.m_A, B, C, mem.m_ssm, y, [0, n], [start], [live], [live], caps,
                                   D=self.m_D, dt_bias=self.m_dt_bias, chunk=CHUNK)
        return linear(y.reshape(n, -1), self.m_out)

    def gated_delta(self, x, start, live, mem, caps, decode):
        n, qk = len(x), G_HEADS * G_KDIM
        proj = linear(x, self.g_in)
        qkv, a, b = proj[:, :G_CONV], proj[:, G_CONV: G_CONV + G_HEADS], proj[:, G_CONV + G_HEADS:]
        conv = np.empty_like(qkv)
        self.conv(qkv, self.g_conv_w, mem.g_conv, conv, start, live, caps, decode)
        q = np.ascontiguousarray(conv[:, :qk].reshape(n, G_HEADS, G_KDIM))
        k = np.ascontiguousarray(conv[:, qk: 2 * qk].reshape(n, G_HEADS, G_KDIM))
        v = np.ascontiguousarray(conv[:, 2 * qk:].reshape(n, G_HEADS, G_VDIM))
        g = (-np.exp(self.g_A_log) * np.logaddexp(F32(0), a + self.g_dt_bias)).astype(F32)  # log-decay
        beta = (1 / (1 + np.exp(-b))).astype(F32)
        out = np.empty_like(v)
        if decode:
            ops.gated_delta_recurrent_step(q, k, v, g, beta, mem.g_state, out, [0, n], [start],
                                           np.array([[live, live]], np.int32), l2norm_qk=True)
        else:
            ops.gated_delta_chunked_prefill(q, k, v, g, beta, mem.g_state, out, [0, n], [start], [live], [live],
                                            caps, chunk=CHUNK, l2norm_qk=True)
        return linear(out.reshape(n, -1), self.g_out)

    @staticmethod
    def conv(x, weight, pool, out, start, live, caps, decode):
        x = np.ascontiguousarray(x)
        if decode:
            ops.causal_conv1d_update(x, weight, None, pool, out, np.array([[live, live]], np.int32))
        else:
            ops.causal_conv1d_prefill(x, weight, None, pool, out, [0, len(x)], [start], [live], [live], caps)
