#!/usr/bin/env bash
# Fleets of 1..16 engines on the chat workload, each engine with GPU budgets of about a tenth of the working
# set and a host tier of 10x them, with no remote tier, a remote tier written back (what the host tiers evict)
# and one written through (as soon as the step that computed a value completed), both probed before every
# prefetch, one written through without probes and one written through with turn ends (chat's turn ends in the
# store too; strict keeps none); affinity on and off; and the references: the same fleets with unlimited memory
# and no remote tier.
#   bench/fleet_tiers.sh <reprise-sim> <out dir>
# Writes <out dir>/<trace>-fleet-<affinity>-<remote>.csv (and charts) per configuration; bench/fleet_table.py
# turns the CSVs into the tables of docs/tiers-fleet.md.
set -euo pipefail
sim=${1:?usage: $0 <reprise-sim> <out dir>}
out=${2:?usage: $0 <reprise-sim> <out dir>}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
stream="$out/chat5k40.jsonl"
[ -f "$stream" ] || "$sim" generate --workload chat --requests 5000 --seed 3 --active-sessions 40 -o "$stream"
engines=1,2,4,8,16
# trace, GPU KV, GPU snapshots (bytes), host KV, host snapshots: the budgets of docs/tiers-sim.md, host 10x.
run() {
  local name=$1 trace=$2 kv=$3 snap=$4 host_kv=$5 host_snap=$6
  for affinity in on off; do
    for remote in none back through through-unprobed turn-ends; do
      local extra=()
      case $remote in
        back | through) extra=(--remote-tier --remote-write "$remote") ;;
        through-unprobed) extra=(--remote-tier --remote-write through --remote-probe off) ;;
        turn-ends) extra=(--remote-tier --remote-write through --remote-turn-ends on) ;;
      esac
      "$sim" sweep --trace "$trace" --model nemotron-h-8b --policy chat,strict --kv-budget "$kv" --snapshot-budget "$snap" \
        --host-kv-budget "$host_kv" --host-snapshot-budget "$host_snap" --affinity "$affinity" "${extra[@]}" \
        --axis engines --values "$engines" --out "$out" --name "$name-fleet-$affinity-$remote" --no-progress >/dev/null
    done
    "$sim" sweep --trace "$trace" --model nemotron-h-8b --policy chat,strict --kv-budget 200GiB --snapshot-budget 60GiB \
      --affinity "$affinity" --axis engines --values "$engines" --out "$out" --name "$name-fleet-$affinity-unlimited" \
      --no-progress >/dev/null
  done
}
run chat-5000-requests "$stream" 208MiB 306413568 2080MiB 3064135680
run chat-40-conversations "$here/traces/chat-40-conversations.jsonl" 60MiB 204275712 600MiB 2042757120
