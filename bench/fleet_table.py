#!/usr/bin/env python3
"""Tables of prefill computed over the floor from the CSVs bench/fleet_tiers.sh writes.

    python3 bench/fleet_table.py <out dir>

For each trace and policy: one row per configuration (affinity, remote tier), one column per engine count;
each cell is computed / floor, and in parentheses computed over what one engine with unlimited memory
computes (the reference of docs/tiers-sim.md). A second table gives the store's traffic.
"""
import csv
import sys
from pathlib import Path

CONFIGS = [
    ("on", "unlimited", "affinity on, unlimited memory, no store"),
    ("on", "none", "affinity on, host 10x, no store"),
    ("on", "back", "affinity on, host 10x, store write-back"),
    ("on", "through", "affinity on, host 10x, store write-through"),
    ("on", "through-unprobed", "affinity on, host 10x, store write-through, no probe"),
    ("on", "turn-ends", "affinity on, host 10x, store write-through + turn ends"),
    ("off", "unlimited", "round robin, unlimited memory, no store"),
    ("off", "none", "round robin, host 10x, no store"),
    ("off", "back", "round robin, host 10x, store write-back"),
    ("off", "through", "round robin, host 10x, store write-through"),
    ("off", "through-unprobed", "round robin, host 10x, store write-through, no probe"),
    ("off", "turn-ends", "round robin, host 10x, store write-through + turn ends"),
]


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    out = Path(sys.argv[1])
    for trace in ("chat-5000-requests", "chat-40-conversations"):
        data = {}
        for aff, remote, _ in CONFIGS:
            for r in rows(out / f"{trace}-fleet-{aff}-{remote}.csv"):
                data[(aff, remote, r["policy"], int(r["engines"]))] = r
        engines = sorted({k[3] for k in data})
        for policy in ("chat", "strict"):
            ref = int(data[("on", "unlimited", policy, 1)]["prefill_tokens"])
            floor = int(data[("on", "unlimited", policy, 1)]["floor_tokens"])
            print(f"\n{trace}, {policy}: computed / floor (/ one engine with unlimited memory, "
                  f"{ref:,} tokens = {ref / floor:.2f}x the floor)\n")
            print("| configuration | " + " | ".join(f"{e} engine{'s' if e > 1 else ''}" for e in engines) + " |")
            print("|---|" + "---|" * len(engines))
            for aff, remote, label in CONFIGS:
                cells = []
                for e in engines:
                    r = data[(aff, remote, policy, e)]
                    if r["error"]:
                        cells.append("error")
                        continue
                    computed = int(r["prefill_tokens"])
                    cells.append(f"{computed / floor:.2f}x ({computed / ref:.2f})")
                print(f"| {label} | " + " | ".join(cells) + " |")
            print(f"\n{trace}, {policy}, 4 engines: the store\n")
            print("| configuration | puts | GiB put | keys probed / found | fetches | blocks / snapshots / turn ends kept "
                  "| GiB fetched | KV from store | per request: puts, MiB put, keys probed, MiB fetched |")
            print("|---|---|---|---|---|---|---|---|---|")
            for aff, remote, label in CONFIGS:
                if remote in ("none", "unlimited"):
                    continue
                r = data[(aff, remote, policy, 4)]
                kv = int(r["kv_matched_tokens"])
                from_store = int(r["remote_blocks_onboarded"]) * int(r["block_size"])
                probed = (f"{int(r['remote_probed_keys']):,} / {int(r['remote_probed_found']):,}"
                          if r.get("remote_probe") == "on" else "-")
                n = int(r["requests"])
                per = (f"{int(r['remote_puts']) / n:.1f}, {int(r['remote_bytes_put']) / 2**20 / n:.0f}, "
                       f"{int(r['remote_probed_keys']) / n:.0f}, {int(r['remote_bytes_fetched']) / 2**20 / n:.0f}")
                print(f"| {label} | {int(r['remote_puts']):,} | {int(r['remote_bytes_put']) / 2**30:.1f} | {probed} | "
                      f"{int(r['remote_fetches']):,} | {int(r['remote_block_hits']):,} / {int(r['remote_snapshot_hits']):,} / "
                      f"{int(r.get('remote_turn_end_hits') or 0):,} | "
                      f"{int(r['remote_bytes_fetched']) / 2**30:.1f} | {100 * from_store / kv if kv else 0:.1f} % | {per} |")


if __name__ == "__main__":
    main()
