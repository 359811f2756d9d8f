#!/usr/bin/env bash
# reprise::redis on loopback against redis-benchmark, on one redis-server started here (no persistence).
#   bench/remote_store_loopback.sh <build dir> [seconds per phase]
# For each size: redis-benchmark SET / GET with one client (-c 1, no pipelining: one request in flight, as the
# store's sequential runs) and with 8 clients, then bench_remote_store with 1 and 8 requests in flight (2 I/O
# threads for the latter). Sizes: 64 KiB and 1 MiB (KV blocks) and 102,129,664 B = 97.4 MiB rounded to bytes,
# a Nemotron-H-8B snapshot (24 Mamba2 layers; reprise-state-sizes prints 102,137,856 B with the conv state).
set -euo pipefail
build=${1:?usage: $0 <build dir> [seconds]}
seconds=${2:-3}
port=${PORT:-6390}
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --dir "$dir" \
  --logfile redis.log --protected-mode no &
server=$!
trap 'kill $server; wait $server 2>/dev/null; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), port $port"
for size in 65536 1048576 102129664; do
  case $size in
    65536) n=20000 ;; 1048576) n=2000 ;; *) n=30 ;;
  esac
  for clients in 1 8; do
    if [ "$size" = 102129664 ] && [ "$clients" = 8 ]; then n8=40; else n8=$n; fi
    echo "redis-benchmark -t set,get -d $size -n $n8 -c $clients -P 1"
    redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d "$size" -n "$n8" -c "$clients" -P 1 --csv
  done
  redis-cli -p "$port" flushall >/dev/null
done
"$build/bench/bench_remote_store" --endpoint "127.0.0.1:$port" --seconds "$seconds" --in-flight 1 --io-threads 1
redis-cli -p "$port" flushall >/dev/null
"$build/bench/bench_remote_store" --endpoint "127.0.0.1:$port" --seconds "$seconds" --in-flight 8 --io-threads 2 \
  --sizes 65536,1048576
