#!/usr/bin/env bash
# Makes the pinned vLLM venv (scripts/fetch-vllm.sh; reused when present) and runs the connector's end-to-end tests
# in it against the Python package the C++ build assembled. The CTest test `vllm:connector` (label `vllm`) runs this;
# REPRISE_VLLM_ARCHS=1 adds every other hybrid architecture (test_vllm_architectures.py: about 6 min, not in CI).
#
#   integrations/vllm/run-tests.sh <build>/python/package [pytest options...]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
package="$1"
shift
python="$("$root/scripts/fetch-vllm.sh" | tail -n 1)"
cd "$root/integrations/vllm"
# In-process engines (bitwise reproducible); the package and its entry points (reprise.vllm.plugin) from the build.
export VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONPATH="$package" PYTHONDONTWRITEBYTECODE=1
exec "$python" -m pytest -q -s -p no:cacheprovider test_vllm_connector.py test_vllm_server.py test_vllm_architectures.py "$@"
