#!/usr/bin/env bash
# Makes the pinned mlx-lm venv (scripts/fetch-mlx.sh; reused when present) and runs the end-to-end tests of
# reprise.mlx in it, through mlx-lm's HTTP server, against the Python package the C++ build assembled. The CTest test
# `mlx:server` (label `mlx`) runs this.
#
#   integrations/mlx-lm/run-tests.sh <build>/python/package [pytest options...]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
package="$(cd "$1" && pwd)"
shift
python="$("$root/scripts/fetch-mlx.sh" | tail -n 1)"
cd "$root/integrations/mlx-lm"
export PYTHONPATH="$package" PYTHONDONTWRITEBYTECODE=1
exec "$python" -m pytest -q -s -p no:cacheprovider test_mlx_server.py "$@"
