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


# ---- element types ----------------------------------------------------------------------------------------------
# The host kernels take fp32 or bf16 activations and, where a kernel takes lossy pools, bf16 / fp16 state pools
# (include/reprise/ops/tensor.hpp). numpy has no bfloat16: reprise.ops takes a uint16 array of the raw bits with
# dtype='bfloat16' / state_dtype='bfloat16'. The references below are the fp32 kernels on the widened values,
# each stored value rounded once, to nearest with ties to even, as from_float<T> does in C++.


def bf16_round(a):
    """float32 -> bfloat16 bits, to nearest with ties to even (NaN stays a quiet NaN): from_float<bfloat16>."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16), rounded)


def bf16_widen(bits):
    """bfloat16 bits -> float32, exactly."""
    return (np.ascontiguousarray(bits, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


# name: (numpy storage type, round float32 to it once, widen it to float32 exactly)
STORAGE = {
    "f32": (np.float32, lambda a: np.asarray(a, np.float32).copy(), lambda a: np.asarray(a, np.float32).copy()),
    "bf16": (np.uint16, bf16_round, bf16_widen),
    "f16": (np.float16, lambda a: np.asarray(a, np.float32).astype(np.float16),
            lambda a: np.asarray(a, np.float16).astype(np.float32)),
}
NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def stored(name, a):
    """`a` (float32) as a `name` array the way reprise.ops takes it, and the float32 values it holds."""
    _, narrow, widen = STORAGE[name]
    s = narrow(a)
    return s, widen(s)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_bf16_helpers_round_like_the_kernels():
    v = np.array([0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF], np.uint32).view(np.float32)
    # test_state_dtypes.cpp's cases: 1, a tie down to even, a tie up to even, above the tie, overflow to inf
    assert bf16_round(v).tolist() == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x7F80]
    every = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    finite = (every & 0x7F80) != 0x7F80
    assert same_bits(bf16_round(bf16_widen(every))[finite], every[finite])


@pytest.mark.parametrize("silu", [True, False])
def test_conv1d_bf16_is_the_fp32_conv_rounded_once(silu):
    """bf16 x, conv window and out: out is the fp32 conv of the widened values rounded once; the window holds
    inputs, so it is stored exactly."""
    T, C, W = 9, 6, 4
    xb, xf = stored("bf16", rand(T, C))
    w, bias = rand(C, W), rand(C)
    pool_b = np.zeros((4, W - 1, C), np.uint16)
    pool_b[2] = bf16_round(rand(W - 1, C))
    pool_f = bf16_widen(pool_b)
    out_b, out_f = np.full((T, C), 7, np.uint16), np.zeros((T, C), np.float32)
    caps = np.array([[0, 25, 1]])
    ops.causal_conv1d_prefill(xf, w, bias, pool_f, out_f, [0, T], [20], [2], [0], caps, silu=silu)
    strided = np.repeat(xb, 2, axis=0)[::2]  # bf16 inputs in another layout are made contiguous, never converted
    ops.causal_conv1d_prefill(strided, w, bias, pool_b, out_b, [0, T], [20], [2], [0], caps, silu=silu,
                              dtype="bfloat16")
    assert same_bits(out_b, bf16_round(out_f))
    assert same_bits(pool_b, bf16_round(pool_f)) and same_bits(bf16_widen(pool_b), pool_f)

    x1b, x1f = stored("bf16", rand(3, C))
    step_b, step_f = np.full((3, C), 7, np.uint16), np.full((3, C), 7.0, np.float32)
    pairs = np.array([[0, 3], [1, 1], [-1, -1]], np.int32)  # fork, in place, padding
    ops.causal_conv1d_update(x1f, w, bias, pool_f, step_f, pairs, silu=silu)
    ops.causal_conv1d_update(x1b, w, bias, pool_b, step_b, pairs, silu=silu, dtype="bf16")
    assert same_bits(step_b[:2], bf16_round(step_f[:2]))
    assert (step_b[2] == 7).all()
    assert same_bits(pool_b, bf16_round(pool_f))


def test_mamba2_prefill_bf16_activations_keep_the_fp32_state():
    T, H, P, G, N = 150, 4, 4, 2, 8
    xb, xf = stored("bf16", rand(T, H, P))
    dtb, dtf = stored("bf16", rand(T, H))
    Bb, Bf = stored("bf16", rand(T, G, N))
    Cb, Cf = stored("bf16", rand(T, G, N))
    zb, zf = stored("bf16", rand(T, H, P))
    A, D, dt_bias = -np.exp(rand(H)), rand(H), rand(H)
    pool_f = np.zeros((3, H, P, N), np.float32)
    pool_f[2] = rand(H, P, N)
    pool_b = pool_f.copy()
    y_f, y_b = np.zeros((T, H, P), np.float32), np.zeros((T, H, P), np.uint16)
    caps = np.array([[0, 64, 1]])
    ops.mamba2_ssd_prefill(xf, dtf, A, Bf, Cf, pool_f, y_f, [0, T], [0], [2], [0], caps, D=D, dt_bias=dt_bias,
                           z=zf, chunk=64)
    ops.mamba2_ssd_prefill(xb, dtb, A, Bb, Cb, pool_b, y_b, [0, T], [0], [2], [0], caps, D=D, dt_bias=dt_bias,
                           z=zb, chunk=64, dtype="bfloat16", state_dtype="float32")
    assert same_bits(y_b, bf16_round(y_f))
    assert same_bits(pool_b, pool_f)


ACTIVATIONS = ["f32", "bf16"]
STATES = ["f32", "bf16", "f16"]


def lossy_pool(state, shape):
    """A `state` pool of random values, and the float32 pool holding exactly the same values."""
    return stored(state, rand(*shape))


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("state", STATES)
def test_mamba2_update_lossy_pool_rounds_the_fp32_update_once(act, state):
    """As test_state_dtypes.cpp: with a bf16 / fp16 pool, y and the stored state equal, bit for bit, those of an
    fp32 pool holding the widened state, the stored state rounded once."""
    H, P, G, N, S = 4, 8, 2, 16, 6
    x, xf = stored(act, rand(3, H, P))
    dt, dtf = stored(act, rand(3, H))
    B, Bf = stored(act, rand(3, G, N))
    C, Cf = stored(act, rand(3, G, N))
    z, zf = stored(act, rand(3, H, P))
    A, D, dt_bias = -np.exp(rand(H)), rand(H), rand(H)
    pool, pool_f = lossy_pool(state, (S, H, P, N))
    before = pool.copy()
    y, y_f = np.full((3, H, P), 7, STORAGE[act][0]), np.full((3, H, P), 7, np.float32)
    pairs = np.array([[1, 4], [-1, 5], [2, 2]], np.int32)  # fork, padding, in place
    ops.mamba2_state_update(xf, dtf, A, Bf, Cf, pool_f, y_f, pairs, D=D, dt_bias=dt_bias, z=zf)
    kw = {"state_dtype": NAMES[state]} if state == "bf16" else {}  # float32 / float16 pools name themselves
    ops.mamba2_state_update(x, dt, A, B, C, pool, y, pairs, D=D, dt_bias=dt_bias, z=z,
                            dtype=NAMES[act] if act == "bf16" else None, **kw)
    assert same_bits(y[[0, 2]], STORAGE[act][1](y_f[[0, 2]]))
    assert (y[1] == 7).all()
    assert same_bits(pool, STORAGE[state][1](pool_f))
    if state != "f32":
        assert (STORAGE[state][2](pool) != pool_f).any()  # the test can tell rounded states from exact ones
    assert same_bits(pool[[0, 1, 3, 5]], before[[0, 1, 3, 5]])


def delta_inputs(act, T, H, HV, K, V):
    q, qf = stored(act, rand(T, H, K))
    k, kf = stored(act, rand(T, H, K))
    v, vf = stored(act, rand(T, HV, V))
    g, beta = -np.abs(rand(T, HV, scale=0.1)), (1 / (1 + np.exp(-rand(T, HV)))).astype(np.float32)
    return (q, k, v, g, beta), (qf, kf, vf, g, beta)


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("state", STATES)
def test_gated_delta_prefill_lossy_pool_rounds_each_store_once(act, state):
    """The host prefill reads a bf16 / fp16 state as fp32 and rounds it once at each capture and at the final
    store: bitwise the fp32 prefill from the widened state, its stored states rounded."""
    T, H, HV, K, V = 100, 2, 4, 16, 8
    ins, ins_f = delta_inputs(act, T, H, HV, K, V)
    pool, pool_f = lossy_pool(state, (4, HV, K, V))
    before = pool.copy()
    out, out_f = np.zeros((T, HV, V), STORAGE[act][0]), np.zeros((T, HV, V), np.float32)
    caps = np.array([[0, 64, 1]])
    ops.gated_delta_chunked_prefill(*ins_f, pool_f, out_f, [0, T], [0], [2], [0], caps, l2norm_qk=True)
    ops.gated_delta_chunked_prefill(*ins, pool, out, [0, T], [0], [2], [0], caps, l2norm_qk=True,
                                    dtype=NAMES[act], state_dtype=NAMES[state])
    assert same_bits(out, STORAGE[act][1](out_f))
    assert same_bits(pool, STORAGE[state][1](pool_f))
    assert same_bits(pool[[2, 3]], before[[2, 3]])


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("state", STATES)
def test_gated_delta_step_lossy_pool_rounds_each_store_once(act, state):
    T, H, HV, K, V = 3, 2, 4, 8, 4
    ins, ins_f = delta_inputs(act, T, H, HV, K, V)
    pool, pool_f = lossy_pool(state, (6, HV, K, V))
    before = pool.copy()
    out, out_f = np.zeros((T, HV, V), STORAGE[act][0]), np.zeros((T, HV, V), np.float32)
    args = ([0, T], [40], np.array([[0, 5]], np.int32))
    ring = dict(ring=[2, 3], ring_size=2, l2norm_qk=True)  # the state after each token too
    ops.gated_delta_recurrent_step(*ins_f, pool_f, out_f, *args, **ring)
    ops.gated_delta_recurrent_step(*ins, pool, out, *args, **ring, dtype=NAMES[act], state_dtype=NAMES[state])
    assert same_bits(out, STORAGE[act][1](out_f))
    assert same_bits(pool, STORAGE[state][1](pool_f))
    assert same_bits(pool[[0, 1, 4]], before[[0, 1, 4]])


def test_a_dtype_no_kernel_takes_is_refused_naming_the_argument_with_nothing_written():
    T, C, W = 2, 6, 4
    x, w = rand(T, C), rand(C, W)
    H, P, G, N = 2, 4, 1, 8
    xm, dt, A, Bm, Cm = rand(T, H, P), rand(T, H), -np.exp(rand(H)), rand(T, G, N), rand(T, G, N)
    q, g, beta = rand(T, H, 8), -np.abs(rand(T, H, scale=0.1)), np.full((T, H), 0.5, np.float32)
    pair = np.array([[0, 1], [2, 3]], np.int32)
    conv_pool, out = rand(4, W - 1, C), np.zeros((T, C), np.float32)
    pool32, pool16 = rand(4, H, P, N), rand(4, H, P, N).astype(np.float16)
    pool_bits = bf16_round(rand(4, H, P, N))
    y = np.zeros((T, H, P), np.float32)

    def conv(**kw):
        a = dict(x=x, weight=w, bias=None, conv_pool=conv_pool, out=out, pairs=pair)
        a.update(kw)
        return lambda: ops.causal_conv1d_update(**a)

    def update(pool, **kw):
        return lambda: ops.mamba2_state_update(xm, dt, A, Bm, Cm, pool, y, pair, **kw)

    def prefill(pool, **kw):
        return lambda: ops.mamba2_ssd_prefill(xm, dt, A, Bm, Cm, pool, y, [0, T], [0], [-1], [0], chunk=64, **kw)

    def step(pool, **kw):
        return lambda: ops.gated_delta_recurrent_step(q, q, rand(T, H, 4), g, beta, pool, np.zeros((T, H, 4),
                                                      np.float32), [0, 1, 2], [0, 0], pair, **kw)

    refused = [  # (call, the argument its message names)
        (conv(dtype="float16"), "dtype"),  # no kernel reads fp16 activations
        (conv(dtype="f8_e4m3"), "dtype"),
        (conv(out=out.astype(np.float16)), "out"),
        (conv(conv_pool=conv_pool.astype(np.float16)), "conv_pool"),
        (conv(out=np.zeros((T, C), np.uint16)), "out"),  # uint16 is bf16 bits only when named
        (conv(x=bf16_round(x), conv_pool=bf16_round(conv_pool), out=np.zeros((T, C), np.uint16)), "out"),
        (conv(conv_pool=bf16_round(conv_pool), out=np.zeros((T, C), np.uint16), dtype="bf16"), "x"),
        (conv(x=bf16_round(x), out=np.zeros((T, C), np.uint16), dtype="bf16"), "conv_pool"),
        (conv(weight=bf16_round(w)), "weight"),  # weights are fp32 in every kernel
        (prefill(pool16), "state_pool"),  # the prefill keeps fp32 states
        (prefill(pool_bits, state_dtype="bfloat16"), "state_dtype"),
        (prefill(pool32, state_dtype=np.float16), "state_dtype"),
        (update(pool_bits), "state_pool"),
        (update(pool16, state_dtype="bfloat16"), "state_pool"),
        (update(pool32, state_dtype="float16"), "state_pool"),
        (update(pool32.astype(np.float64)), "state_pool"),
        (update(pool32.astype(np.float64), state_dtype="float64"), "state_dtype"),
        (update(pool32, dtype="bfloat16"), "x"),
        (step(pool_bits), "state_pool"),
        (step(pool32, state_dtype="f8_e5m2"), "state_dtype"),
    ]
    written = [conv_pool, out, pool32, pool16, pool_bits, y]
    before = [a.copy() for a in written]
    for call, arg in refused:
        with pytest.raises(TypeError, match=rf": {arg}: "):
            call()
        for a, b in zip(written, before):
            assert same_bits(a, b)
    with pytest.raises(ValueError, match="unknown dtype"):
        update(pool32, state_dtype="float3")()
    assert same_bits(pool32, before[2])


def test_ops_take_the_dtypes_a_model_config_names():
    """A shape's conv_dtype and state_dtype are the element types of the pools the kernels take: a pool of
    conv_state_bytes / matrix_state_bytes per slot, passed with dtype=conv_dtype / state_dtype=state_dtype.
    fp32 is the default state type; conv_dtype='f32' is an engine that keeps fp32 conv windows."""
    pair = np.array([[0, 1]], np.int32)
    for conv_dtype in ("f32", "bf16"):
        for state_dtype in STATES:
            m = reprise.Mamba2Shape(heads=2, head_dim=4, state_dim=8, groups=1, conv_width=4, chunk=64,
                                    state_dtype=state_dtype, conv_dtype=conv_dtype)
            d = reprise.GatedDeltaShape(key_heads=1, value_heads=2, key_dim=8, value_dim=4, conv_width=3, chunk=64,
                                        state_dtype=state_dtype, conv_dtype=conv_dtype)
            for shape in (m, d):
                W, C = shape.conv_width, shape.conv_channels
                conv_pool = np.zeros((2, W - 1, C), STORAGE[shape.conv_dtype][0])
                assert conv_pool[0].nbytes == shape.conv_state_bytes
                x, _ = stored(shape.conv_dtype, rand(1, C))
                out = np.zeros((1, C), STORAGE[shape.conv_dtype][0])
                ops.causal_conv1d_update(x, rand(C, W), None, conv_pool, out, pair, dtype=shape.conv_dtype)
                assert same_bits(conv_pool[1, -1], x[0])
            pool = np.zeros((2, m.heads, m.head_dim, m.state_dim), STORAGE[m.state_dtype][0])
            assert pool[0].nbytes == m.matrix_state_bytes
            y = np.zeros((1, m.heads, m.head_dim), STORAGE[m.conv_dtype][0])

            def act(*s):
                return stored(m.conv_dtype, rand(*s))[0]

            ops.mamba2_state_update(act(1, 2, 4), act(1, 2), -np.ones(2, np.float32), act(1, 1, 8), act(1, 1, 8),
                                    pool, y, pair, dtype=m.conv_dtype, state_dtype=m.state_dtype)
            pool = np.zeros((2, d.value_heads, d.key_dim, d.value_dim), STORAGE[d.state_dtype][0])
            assert pool[0].nbytes == d.matrix_state_bytes
            out = np.zeros((1, 2, 4), STORAGE[d.conv_dtype][0])
            ops.gated_delta_recurrent_step(act(1, 1, 8), act(1, 1, 8), act(1, 2, 4), np.full((1, 2), -0.1, np.float32),
                                           np.full((1, 2), 0.5, np.float32), pool, out, [0, 1], [0], pair,
                                           dtype=d.conv_dtype, state_dtype=d.state_dtype)
            assert pool[1].any()
    # A float16 checkpoint's conv windows (conv_dtype 'f16', from torch_dtype) have no host kernel.
    m = reprise.Mamba2Shape(heads=2, head_dim=4, state_dim=8, conv_dtype="f16")
    C = m.conv_channels
    with pytest.raises(TypeError, match="dtype"):
        ops.causal_conv1d_update(rand(1, C).astype(np.float16), rand(C, 4), None,
                                 np.zeros((1, 3, C), np.float16), np.zeros((1, C), np.float16),
                                 np.array([[0, 0]], np.int32), dtype=m.conv_dtype)
