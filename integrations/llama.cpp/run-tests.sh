#!/usr/bin/env bash
# Fetches, patches and builds llama-server with Reprise (scripts/fetch-llama.sh), then runs the exactness tests
# through its HTTP API (test_llama_server.py). The CTest test `llama:server_exactness` (label `llama`) runs this.
#
#   integrations/llama.cpp/run-tests.sh [work folder] [test_llama_server.py options...]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-$root/build-llama-tests}"
shift || true
"$root/scripts/fetch-llama.sh"
bin="$("$root/scripts/fetch-llama.sh" --bin-dir)"
exec python3 "$root/integrations/llama.cpp/test_llama_server.py" --server "$bin/llama-server" \
  --archs "$bin/test-llama-archs" --workdir "$work" "$@"
