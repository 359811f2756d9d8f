#!/usr/bin/env python3
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""Peer comparison of the chunked prefills: Reprise vs mamba_ssm's Triton SSD (`mamba_chunk_scan_combined`) and
vs flash-linear-attention's `chunk_gated_delta_rule`, on the same operands (docs/gpu.md explains every column).

Reprise runs in its own program, bench/gpu/peer_op.cpp (`reprise-peer-op` on the device, timed with CUDA events;
`reprise-peer-op-host` anywhere), reading the operands this script writes. The peers run in this process and
are timed with triton.testing.do_bench (median). Both sides get bit-identical inputs: operands are drawn in
fp32, rounded to the run's dtype, and the rounded values are what each side reads.

Agreement (relative RMS, ||a - b|| / ||b||, over a whole tensor; NaN never passes):
  Reprise vs peer, outputs and final states     <= 1e-3 (fp32 inputs) / 1e-2 (bf16 inputs)
  Reprise vs an fp64 sequential reference       states <= 1e-5; outputs <= 1e-5 (fp32) / 2^-8 (bf16 outputs)
The fp64 reference runs for totals up to --ref-max-tokens (it is a token-by-token loop).

On a machine without a GPU: TRITON_INTERPRET=1 python3 bench/gpu/peer_compare.py --device cpu --models tiny ...
(the peers' Triton kernels run in Triton's interpreter, Reprise in reprise-peer-op-host; no timing).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402


@dataclass(frozen=True)
class model:
    name: str
    op: str  # mamba2_ssd | gated_delta
    dims: dict = field(default_factory=dict)


MODELS = {
    # Nemotron-H-8B Mamba2 layer: H128 P64 N128, 8 groups, checkpoint chunk_size 128.
    "nemotron-h-8b": model("nemotron-h-8b", "mamba2_ssd", dict(heads=128, head_dim=64, groups=8, state_dim=128, chunk=128)),
    # Qwen3-Next-80B-A3B gated-delta layer: 16 key heads, 32 value heads, K = V = 128, Q64, L2-normalized q, k.
    "qwen3-next-80b-a3b": model("qwen3-next-80b-a3b", "gated_delta",
                                dict(key_heads=16, value_heads=32, key_dim=128, value_dim=128, chunk=64, l2norm=1)),
    # The shapes of the reduced kernel set (what CI builds): for CPU validation and quick device checks.
    "tiny-mamba2": model("tiny-mamba2", "mamba2_ssd", dict(heads=4, head_dim=16, groups=2, state_dim=16, chunk=64)),
    "tiny-gated-delta": model("tiny-gated-delta", "gated_delta",
                              dict(key_heads=2, value_heads=4, key_dim=32, value_dim=16, chunk=64, l2norm=1)),
}
MODEL_SETS = {"models": ["nemotron-h-8b", "qwen3-next-80b-a3b"], "tiny": ["tiny-mamba2", "tiny-gated-delta"]}

TOL_PEER = {"f32": 1e-3, "bf16": 1e-2}
TOL_REF_STATE = 1e-5
TOL_REF_OUT = {"f32": 1e-5, "bf16": 2.0**-8}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def rel_rms(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    if a.numel() != b.numel():
        return math.nan
    den = torch.linalg.vector_norm(b).item()
    num = torch.linalg.vector_norm(a - b).item()
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def ok(v: float, tol: float) -> bool:
    return v == v and v <= tol  # NaN never passes


def lengths_of(total: int, layout: str, chunk: int) -> list[int]:
    """Sequence lengths of a batch: one sequence, or a varlen batch of 4 with lengths off the chunk grid."""
    if layout == "single":
        return [total]
    parts = [int(total * f) for f in (0.4, 0.3, 0.2)]
    parts = [max(1, p - (chunk // 2 + 3) if p > chunk else p) for p in parts]
    parts.append(total - sum(parts))
    if min(parts) < 1:
        raise SystemExit(f"peer_compare: total {total} too small for a varlen batch")
    return parts


# ---- operands --------------------------------------------------------------------------------------------
def make_operands(m: model, lengths: list[int], dtype: str, dev: torch.device, seed: int, initial: bool) -> dict:
    g = torch.Generator(device="cpu").manual_seed(seed)
    T, S, d = sum(lengths), len(lengths), m.dims
    lo = DTYPES[dtype]

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(lo).to(dev)

    ops = {}
    if m.op == "mamba2_ssd":
        H, P, G, N = d["heads"], d["head_dim"], d["groups"], d["state_dim"]
        ops["x"] = rnd(T, H, P)
        ops["dt"] = rnd(T, H, scale=0.5)
        ops["B"] = rnd(T, G, N)
        ops["C"] = rnd(T, G, N)
        ops["A"] = (-torch.exp(torch.empty(H).uniform_(math.log(1.0), math.log(16.0), generator=g))).to(dev)
        dt0 = torch.exp(torch.empty(H).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
        ops["dt_bias"] = (dt0 + torch.log(-torch.expm1(-dt0))).to(dev)  # softplus^-1(dt0)
        ops["D"] = (torch.randn(H, generator=g) * 0.5 + 1.0).to(dev)
        state = (H, P, N)
    else:
        H, HV, K, V = d["key_heads"], d["value_heads"], d["key_dim"], d["value_dim"]
        ops["q"] = rnd(T, H, K)
        ops["k"] = rnd(T, H, K)
        ops["v"] = rnd(T, HV, V)
        ops["g"] = (-torch.exp(torch.empty(T, HV).uniform_(math.log(1e-3), math.log(0.5), generator=g))).to(dev)
        # beta is rounded to the run's dtype (engines compute it in bf16) and read as fp32 by both sides.
        ops["beta"] = torch.sigmoid(torch.randn(T, HV, generator=g)).to(lo).float().to(dev)
        state = (HV, K, V)
    if initial:
        ops["initial"] = (torch.randn(S, *state, generator=g) * 0.1).to(dev)
    return ops


# ---- Reprise, through bench/gpu/peer_op.cpp ------------------------------------------------------------
def run_reprise(binary: Path, m: model, lengths: list[int], dtype: str, ops: dict, work: Path, reps: int) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    spec = [f"op {m.op}", f"dtype {dtype}", "cu_seqlens " + " ".join(map(str, cu)), "captures 1", f"reps {reps}"]
    spec += [f"{k} {v}" for k, v in m.dims.items()]
    (work / "spec.txt").write_text("\n".join(spec) + "\n")
    for name, t in ops.items():
        t = t.detach().contiguous().cpu()
        if name == "initial":
            t.float().numpy().tofile(work / "initial.f32")
        elif t.dtype == torch.bfloat16:
            t.view(torch.int16).numpy().tofile(work / name)
        else:
            t.float().numpy().tofile(work / name)
    t0 = time.perf_counter()
    proc = subprocess.run([str(binary), str(work)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{binary.name} failed ({proc.returncode}): {proc.stderr.strip()}")
    d = m.dims
    state = (d["heads"], d["head_dim"], d["state_dim"]) if m.op == "mamba2_ssd" else (d["value_heads"], d["key_dim"], d["value_dim"])
    out_shape = (int(cu[-1]), d["heads"], d["head_dim"]) if m.op == "mamba2_ssd" else (int(cu[-1]), d["value_heads"], d["value_dim"])
    out_name = "y.f32" if m.op == "mamba2_ssd" else "out.f32"
    res = {
        "out": torch.from_numpy(np.fromfile(work / out_name, dtype=np.float32).reshape(out_shape)),
        "final": torch.from_numpy(np.fromfile(work / "final.f32", dtype=np.float32).reshape(len(lengths), *state)),
        "wall_s": wall,
    }
    caps = [tuple(map(int, l.split())) for l in (work / "captures.txt").read_text().splitlines() if l.strip()]
    res["capture_points"] = caps
    res["captures"] = torch.from_numpy(np.fromfile(work / "captures.f32", dtype=np.float32).reshape(len(caps), *state))
    timing = dict(l.split() for l in (work / "timing.txt").read_text().splitlines() if l.strip())
    res["ms"] = float(timing["median_ms"]) if "median_ms" in timing else math.nan
    return res


# ---- peers -----------------------------------------------------------------------------------------------
def run_mamba_peer(fns, m: model, lengths: list[int], ops: dict, timed: bool) -> dict:
    combined, fwd, _ = fns
    dev = ops["x"].device
    S, Q = len(lengths), m.dims["chunk"]
    x, dt, B, C = (ops[k].unsqueeze(0) for k in ("x", "dt", "B", "C"))
    init = ops["initial"] if "initial" in ops else None  # batch 1: one initial state (single layout only)
    cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int32, device=dev)
    seq_idx = torch.repeat_interleave(torch.arange(S, dtype=torch.int32, device=dev),
                                      torch.tensor(lengths, device=dev)).unsqueeze(0) if S > 1 else None
    kw = dict(D=ops["D"], dt_bias=ops["dt_bias"], initial_states=init, seq_idx=seq_idx, dt_softplus=True)
    with torch.inference_mode():
        if S > 1:
            o, _, _, _, states, _, varlen = fwd(x, dt, ops["A"], B, C, Q, cu_seqlens=cu, **kw)
            final = varlen
        else:
            o, _, _, _, states, final = fwd(x, dt, ops["A"], B, C, Q, **kw)[:6]
        res = {"out": o[0].float().cpu(), "final": final.float().cpu(), "chunk_states": states[0].float().cpu()}
        if timed:
            import triton.testing
            call = (lambda: combined(x, dt, ops["A"], B, C, Q, cu_seqlens=cu, return_final_states=True,
                                     return_varlen_states=True, **kw)) if S > 1 else \
                   (lambda: combined(x, dt, ops["A"], B, C, Q, return_final_states=True, **kw))
            res["ms"] = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median")
        else:
            res["ms"] = math.nan
    return res


def run_fla_peer(fns, m: model, lengths: list[int], ops: dict, timed: bool) -> dict:
    chunk_gdr, _ = fns
    dev = ops["q"].device
    lo = ops["q"].dtype
    cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.long, device=dev)
    q, k, v = (ops[n].unsqueeze(0) for n in ("q", "k", "v"))
    g, beta = ops["g"].unsqueeze(0), ops["beta"].to(lo).unsqueeze(0)
    kw = dict(scale=1.0 / math.sqrt(m.dims["key_dim"]), initial_state=ops.get("initial"), output_final_state=True,
              cu_seqlens=cu, use_qk_l2norm_in_kernel=bool(m.dims["l2norm"]))
    with torch.inference_mode():
        o, final = chunk_gdr(q, k, v, g, beta, **kw)
        res = {"out": o[0].float().cpu(), "final": final.float().cpu()}
        if timed:
            import triton.testing
            res["ms"] = triton.testing.do_bench(lambda: chunk_gdr(q, k, v, g, beta, **kw), warmup=25, rep=200,
                                                return_mode="median")
        else:
            res["ms"] = math.nan
    return res


# ---- fp64 sequential references (token by token; the states at every capture point) ------------------------
def ref_mamba(m: model, lengths: list[int], ops: dict, points: list[tuple[int, int]]) -> dict:
    d = m.dims
    H, G = d["heads"], d["groups"]
    dev = ops["x"].device
    x, dtr, B, C = (ops[k].double() for k in ("x", "dt", "B", "C"))
    A, D, bias = ops["A"].double(), ops["D"].double(), ops["dt_bias"].double()
    gi = torch.arange(H, device=dev) // (H // G)
    out = torch.empty_like(x)
    finals, caps = [], {}
    row = 0
    for s, L in enumerate(lengths):
        S_ = ops["initial"][s].double().clone() if "initial" in ops else torch.zeros(H, d["head_dim"], d["state_dim"], dtype=torch.float64, device=dev)
        for t in range(L):
            r = row + t
            dt = torch.nn.functional.softplus(dtr[r] + bias)
            S_ = torch.exp(dt * A)[:, None, None] * S_ + (dt[:, None] * x[r])[:, :, None] * B[r][gi][:, None, :]
            out[r] = torch.einsum("hpn,hn->hp", S_, C[r][gi]) + D[:, None] * x[r]
            if (s, t + 1) in points:
                caps[(s, t + 1)] = S_.clone()
        finals.append(S_)
        row += L
    return {"out": out.cpu(), "final": torch.stack(finals).cpu(), "caps": {k: v.cpu() for k, v in caps.items()}}


def ref_gated_delta(m: model, lengths: list[int], ops: dict, points: list[tuple[int, int]]) -> dict:
    d = m.dims
    H, HV, K, V = d["key_heads"], d["value_heads"], d["key_dim"], d["value_dim"]
    dev = ops["q"].device
    hi = torch.arange(HV, device=dev) // (HV // H)
    q, k, v, g, beta = (ops[n].double() for n in ("q", "k", "v", "g", "beta"))
    if d["l2norm"]:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q / math.sqrt(K)
    out = torch.empty(q.shape[0], HV, V, dtype=torch.float64, device=dev)
    finals, caps = [], {}
    row = 0
    for s, L in enumerate(lengths):
        S_ = ops["initial"][s].double().clone() if "initial" in ops else torch.zeros(HV, K, V, dtype=torch.float64, device=dev)
        for t in range(L):
            r = row + t
            kr, qr = k[r][hi], q[r][hi]
            S_ = torch.exp(g[r])[:, None, None] * S_
            vn = beta[r][:, None] * (v[r] - torch.einsum("hkv,hk->hv", S_, kr))
            S_ = S_ + kr[:, :, None] * vn[:, None, :]
            out[r] = torch.einsum("hkv,hk->hv", S_, qr)
            if (s, t + 1) in points:
                caps[(s, t + 1)] = S_.clone()
        finals.append(S_)
        row += L
    return {"out": out.cpu(), "final": torch.stack(finals).cpu(), "caps": {k: v.cpu() for k, v in caps.items()}}


# ---- one case --------------------------------------------------------------------------------------------
COLUMNS = ["model", "op", "peer", "dtype", "layout", "sequences", "tokens", "reprise_ms", "peer_ms",
           "reprise_tokens_per_s", "peer_tokens_per_s", "throughput_ratio", "out_vs_peer", "final_vs_peer",
           "captures_vs_peer", "tol_peer", "out_vs_fp64", "states_vs_fp64", "peer_out_vs_fp64", "pass"]


def run_case(a, m: model, fns, dtype: str, layout: str, total: int, seed: int) -> dict:
    dev = torch.device(a.device)
    lengths = lengths_of(total, layout, m.dims["chunk"])
    # mamba_ssm takes one initial state per batch row: initial states only for a single sequence there.
    initial = m.op == "gated_delta" or layout == "single"
    ops = make_operands(m, lengths, dtype, dev, seed, initial)
    timed = a.device != "cpu"
    work = Path(a.work) / f"{m.name}-{dtype}-{layout}-{total}"
    rep = run_reprise(Path(a.reprise_op), m, lengths, dtype, ops, work, a.reps)
    peer = (run_mamba_peer if m.op == "mamba2_ssd" else run_fla_peer)(fns, m, lengths, ops, timed)
    row = dict(model=m.name, op=m.op, peer="mamba_ssm" if m.op == "mamba2_ssd" else "fla", dtype=dtype,
               layout=layout, sequences=len(lengths), tokens=total, reprise_ms=rep["ms"], peer_ms=peer["ms"])
    row["reprise_tokens_per_s"] = total / (rep["ms"] * 1e-3) if rep["ms"] == rep["ms"] else math.nan
    row["peer_tokens_per_s"] = total / (peer["ms"] * 1e-3) if peer["ms"] == peer["ms"] else math.nan
    row["throughput_ratio"] = peer["ms"] / rep["ms"] if rep["ms"] == rep["ms"] and peer["ms"] == peer["ms"] else math.nan
    row["out_vs_peer"] = rel_rms(rep["out"], peer["out"])
    row["final_vs_peer"] = rel_rms(rep["final"], peer["final"])
    # mamba_ssm's chunk states sit on the packed grid: they match Reprise's captures of the first sequence,
    # which starts at token 0 (its chunk ends are chunk ends of the packed stream too).
    row["captures_vs_peer"] = math.nan
    if "chunk_states" in peer:
        Q = m.dims["chunk"]
        idx = [i for i, (s, p) in enumerate(rep["capture_points"]) if s == 0]
        if idx:
            mine = rep["captures"][idx]
            theirs = peer["chunk_states"][[rep["capture_points"][i][1] // Q for i in idx]]
            row["captures_vs_peer"] = rel_rms(mine, theirs)
    tol = TOL_PEER[dtype]
    row["tol_peer"] = tol
    passed = ok(row["out_vs_peer"], tol) and ok(row["final_vs_peer"], tol)
    if row["captures_vs_peer"] == row["captures_vs_peer"]:
        passed = passed and ok(row["captures_vs_peer"], tol)
    row["out_vs_fp64"] = row["states_vs_fp64"] = row["peer_out_vs_fp64"] = math.nan
    if total <= a.ref_max_tokens:
        points = set(rep["capture_points"])
        ref = (ref_mamba if m.op == "mamba2_ssd" else ref_gated_delta)(m, lengths, ops, points)
        # The reference output in the run's dtype: each side rounds its output once.
        ref_out = ref["out"].to(DTYPES[dtype]).double() if dtype == "bf16" else ref["out"]
        row["out_vs_fp64"] = rel_rms(rep["out"], ref_out)
        mine = torch.cat([rep["final"].flatten(), rep["captures"].flatten()])
        theirs = torch.cat([ref["final"].flatten()] + [ref["caps"][p].flatten() for p in rep["capture_points"]])
        row["states_vs_fp64"] = rel_rms(mine, theirs)
        row["peer_out_vs_fp64"] = rel_rms(peer["out"], ref_out)
        passed = passed and ok(row["out_vs_fp64"], TOL_REF_OUT[dtype]) and ok(row["states_vs_fp64"], TOL_REF_STATE)
    row["pass"] = int(passed)
    return row


def fmt(v) -> str:
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:.3g}"
    return str(v)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kit", default=os.environ.get("REPRISE_GPU_KIT", ".deps/gpu-kit"))
    p.add_argument("--reprise-op", required=True, help="reprise-peer-op (device) or reprise-peer-op-host")
    p.add_argument("--device", default="cuda", help="cuda (timed) or cpu (agreement only; TRITON_INTERPRET=1)")
    p.add_argument("--models", default="models", help="'models', 'tiny' or a comma list of " + ", ".join(MODELS))
    p.add_argument("--tokens", default="2048,8192,32768,65536", help="comma list of total tokens per batch")
    p.add_argument("--layouts", default="single,varlen")
    p.add_argument("--dtypes", default="bf16,f32")
    p.add_argument("--reps", type=int, default=20, help="Reprise's timed repetitions")
    p.add_argument("--ref-max-tokens", type=int, default=2048, help="fp64 reference up to this total")
    p.add_argument("--work", default=None, help="operand folders (default: a temporary folder)")
    p.add_argument("--out", default=None, help="CSV file to write, a row per case as it finishes")
    p.add_argument("--append", action="store_true", help="add the rows to --out (its header only if it is empty)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--fla-entry", default="chunk", choices=["chunk", "fused_recurrent"],
                   help="fla entry point (fused_recurrent: CPU validation, whose interpreter cannot run fla's chunk kernels)")
    a = p.parse_args()

    if a.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        print("peer_compare: --device cpu needs TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    peers.add_kit(Path(a.kit))
    if a.device == "cpu":
        peers.cpu_shims()
    names = MODEL_SETS.get(a.models, a.models.split(","))
    ms = [MODELS[n] for n in names]
    fns = {}
    if any(m.op == "mamba2_ssd" for m in ms):
        fns["mamba2_ssd"] = peers.mamba_ssd()
    if any(m.op == "gated_delta" for m in ms):
        fns["gated_delta"] = peers.fla_gated_delta(a.fla_entry)
    versions = []
    if "mamba2_ssd" in fns:
        versions.append(f"mamba_ssm {fns['mamba2_ssd'][2]}")
    if "gated_delta" in fns:
        versions.append(f"fla {fns['gated_delta'][1]} ({a.fla_entry}_gated_delta_rule)")
    dev_name = torch.cuda.get_device_name() if a.device != "cpu" else "cpu (TRITON_INTERPRET=1)"
    import triton
    print(f"# device: {dev_name}; torch {torch.__version__}; triton {triton.__version__}; " + "; ".join(versions))

    tmp = None
    if a.work is None:
        tmp = tempfile.mkdtemp(prefix="reprise-peers-")
        a.work = tmp
    rows, failed = [], 0
    # Rows are written as they come (a run stopped by a time limit keeps what it finished), in the order of
    # the arguments with the dtype outermost: every model's first dtype before any model's second.
    out = csv_file = None
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        fresh = not a.append or not Path(a.out).is_file() or Path(a.out).stat().st_size == 0
        csv_file = open(a.out, "w" if fresh else "a", newline="")
        out = csv.DictWriter(csv_file, fieldnames=COLUMNS, extrasaction="ignore")
        if fresh:
            out.writeheader()
            csv_file.flush()
    try:
        for dtype in a.dtypes.split(","):
            for m in ms:
                for layout in a.layouts.split(","):
                    for total in (int(t) for t in a.tokens.split(",")):
                        try:
                            row = run_case(a, m, fns[m.op], dtype, layout, total, a.seed)
                        except Exception as e:  # one failing case must not hide the others
                            row = dict(model=m.name, op=m.op, dtype=dtype, layout=layout, tokens=total, **{"pass": 0})
                            print(f"FAILED {m.name} {dtype} {layout} {total}: {type(e).__name__}: {e}", file=sys.stderr)
                            traceback.print_exc()
                        rows.append(row)
                        failed += row["pass"] == 0
                        print("  ".join(f"{c}={fmt(row.get(c, math.nan))}" for c in COLUMNS), flush=True)
                        if out:
                            out.writerow({c: row.get(c, "") for c in COLUMNS})
                            csv_file.flush()
                        if a.device != "cpu":
                            torch.cuda.empty_cache()
    finally:
        if csv_file:
            csv_file.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"peer_compare: {len(rows) - failed} of {len(rows)} cases within tolerance")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
