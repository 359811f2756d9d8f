# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""reprise.ops on numpy arrays: in-place writes, and a prefill resumed from a capture is bitwise the
uninterrupted one (the property prefix caching relies on)."""

import numpy as np
import pytest

import reprise

pytestmark = pytest.mark.skipif(not reprise.HAS_OPS, reason="built without reprise::state_ops")
ops = reprise.ops if reprise.HAS_OPS else None
rng = np.random.default_rng(0)


def rand(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def test_copy_units_copies_every_pool():
    a, b = rand(4, 3, 5), rand(4, 7)
    a0, b0 = a.copy(), b.copy()
    ops.copy_units([a, b], np.array([[0, 2], [1, 3]], np.int32))
    np.testing.assert_array_equal(a[2], a0[0])
    np.testing.assert_array_equal(b[3], b0[1])
    np.testing.assert_array_equal(a[:2], a0[:2])


def test_conv1d_update_matches_prefill():
    T, C, W = 10, 6, 4
    x, w, bias = rand(T, C), rand(C, W), rand(C)
    pool, out = np.zeros((3, W - 1, C), np.float32), np.zeros((T, C), np.float32)
    ops.causal_conv1d_prefill(x, w, bias, pool, out, [0, T], [0], [-1], [0])
    pool2, step = np.zeros_like(pool), np.zeros((1, C), np.float32)
    for t in range(T):
        ops.causal_conv1d_update(x[t:t + 1], w, bias, pool2, step, np.array([[1, 1]], np.int32))
        np.testing.assert_allclose(step[0], out[t], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(pool2[1], pool[0])


def test_mamba2_resume_from_capture_is_bitwise():
    T, H, P, N, Q = 200, 2, 4, 8, 64
    x, dt, A, B, C, D = rand(T, H, P), rand(T, H), -np.exp(rand(H)), rand(T, 1, N), rand(T, 1, N), rand(H)
    pool, y = np.zeros((3, H, P, N), np.float32), np.zeros((T, H, P), np.float32)
    ops.mamba2_ssd_prefill(x, dt, A, B, C, pool, y, [0, T], [0], [-1], [0], np.array([[0, 128, 2]]), D=D, chunk=Q)
    y2 = np.zeros((T - 128, H, P), np.float32)
    ops.mamba2_ssd_prefill(x[128:], dt[128:], A, B[128:], C[128:], pool, y2, [0, T - 128], [128], [2], [1],
                           D=D, chunk=Q)
    assert y2.tobytes() == y[128:].tobytes()
    assert pool[1].tobytes() == pool[0].tobytes()


def test_gated_delta_resume_from_capture_is_bitwise():
    T, H, K, V = 150, 2, 16, 8
    q, k, v = rand(T, H, K), rand(T, H, K), rand(T, H, V)
    g, beta = -np.abs(rand(T, H, scale=0.1)), (1 / (1 + np.exp(-rand(T, H)))).astype(np.float32)
    pool, out = np.zeros((3, H, K, V), np.float32), np.zeros((T, H, V), np.float32)
    ops.gated_delta_chunked_prefill(q, k, v, g, beta, pool, out, [0, T], [0], [-1], [0], np.array([[0, 64, 2]]),
                                    l2norm_qk=True)
    out2 = np.zeros((T - 64, H, V), np.float32)
    ops.gated_delta_chunked_prefill(q[64:], k[64:], v[64:], g[64:], beta[64:], pool, out2, [0, T - 64], [64], [2],
                                    [1], l2norm_qk=True)
    assert out2.tobytes() == out[64:].tobytes()
    assert pool[1].tobytes() == pool[0].tobytes()
    step = np.zeros((1, H, V), np.float32)
    ops.gated_delta_recurrent_step(q[:1], k[:1], v[:1], g[:1], beta[:1], pool, step, [0, 1], [T],
                                   np.array([[0, 0]], np.int32), l2norm_qk=True)
    assert np.isfinite(step).all()


def test_outputs_are_never_converted_inputs_are():
    x, w = np.zeros((1, 2)), rand(2, 4)  # float64 input: converted
    pool, out = np.zeros((1, 3, 2), np.float32), np.zeros((1, 2), np.float32)
    ops.causal_conv1d_update(x, w, None, pool, out, np.array([[0, 0]], np.int32))
    with pytest.raises(TypeError):  # a float64 output would be written into a temporary copy
        ops.causal_conv1d_update(x, w, None, pool, np.zeros((1, 2)), np.array([[0, 0]], np.int32))
    with pytest.raises(TypeError):
        ops.causal_conv1d_update(x, w, None, pool[:, ::-1], out, np.array([[0, 0]], np.int32))


def _not_written_in_place(a):
    """Arrays that hold `a`'s values but whose memory a C-contiguous write would miss: a strided view, a
    negative stride, Fortran order."""
    big = np.zeros((a.shape[0] * 2,) + a.shape[1:], a.dtype)
    big[::2] = a
    variants = [big[::2], np.ascontiguousarray(a[::-1])[::-1], np.asfortranarray(a)]
    return [v for v in variants if not v.flags.c_contiguous]  # a leading extent of 1 is contiguous either way


def test_every_output_and_pool_refuses_an_array_it_could_only_write_through_a_copy():
    """Every state pool and output of every entry point is taken in place or refused with TypeError: a
    converted copy would take the writes and be thrown away (copy_units once wrote nothing that way)."""
    T, C, W = 4, 6, 4
    x, w, bias = rand(T, C), rand(C, W), rand(C)
    H, P, N = 2, 4, 8
    xm, dt, A, Bm, Cm = rand(T, H, P), rand(T, H), -np.exp(rand(H)), rand(T, 1, N), rand(T, 1, N)
    K, V = 16, 8
    q, k, v = rand(T, H, K), rand(T, H, K), rand(T, H, V)
    g, beta = -np.abs(rand(T, H, scale=0.1)), (1 / (1 + np.exp(-rand(T, H)))).astype(np.float32)
    pair = np.array([[0, 1]], np.int32)
    calls = {  # entry point: (build a call from its writable arrays, those arrays)
        "copy_units": (lambda a, b: ops.copy_units([a, b], pair), [rand(3, 5, 2), rand(3, 4)]),
        "transfer_units": (lambda a: ops.transfer_units([rand(3, 5, 2)], [a], pair), [rand(3, 5, 2)]),
        "causal_conv1d_prefill": (lambda pool, out: ops.causal_conv1d_prefill(x, w, bias, pool, out, [0, T], [0],
                                                                              [-1], [0]),
                                  [np.zeros((2, W - 1, C), np.float32), np.zeros((T, C), np.float32)]),
        "causal_conv1d_update": (lambda pool, out: ops.causal_conv1d_update(x[:1], w, bias, pool, out, pair),
                                 [np.zeros((2, W - 1, C), np.float32), np.zeros((1, C), np.float32)]),
        "mamba2_ssd_prefill": (lambda pool, y: ops.mamba2_ssd_prefill(xm, dt, A, Bm, Cm, pool, y, [0, T], [0], [-1],
                                                                      [0], chunk=64),
                               [np.zeros((2, H, P, N), np.float32), np.zeros((T, H, P), np.float32)]),
        "mamba2_state_update": (lambda pool, y: ops.mamba2_state_update(xm[:1], dt[:1], A, Bm[:1], Cm[:1], pool, y,
                                                                        pair),
                                [np.zeros((2, H, P, N), np.float32), np.zeros((1, H, P), np.float32)]),
        "gated_delta_chunked_prefill": (lambda pool, out: ops.gated_delta_chunked_prefill(
            q, k, v, g, beta, pool, out, [0, T], [0], [-1], [0]),
            [np.zeros((2, H, K, V), np.float32), np.zeros((T, H, V), np.float32)]),
        "gated_delta_recurrent_step": (lambda pool, out: ops.gated_delta_recurrent_step(
            q[:1], k[:1], v[:1], g[:1], beta[:1], pool, out, [0, 1], [0], pair),
            [np.zeros((2, H, K, V), np.float32), np.zeros((1, H, V), np.float32)]),
    }
    public = {name for name in dir(ops) if not name.startswith("_")}
    assert public == set(calls), "a new entry point needs its case here"
    for name, (call, arrays) in calls.items():
        call(*arrays)  # the arrays as given are written in place
        for i, a in enumerate(arrays):
            for bad in _not_written_in_place(a):
                before = bad.copy()
                args = list(arrays)
                args[i] = bad
                with pytest.raises(TypeError):
                    call(*args)
                np.testing.assert_array_equal(bad, before)
            wrong_dtype = list(arrays)
            wrong_dtype[i] = a.astype(np.float64)
            if name not in ("copy_units", "transfer_units"):  # unit copies take any dtype
                with pytest.raises(TypeError):
                    call(*wrong_dtype)
