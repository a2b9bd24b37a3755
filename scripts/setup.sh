#!/usr/bin/env bash
# Set up a development environment in .venv: the package (editable) with its NVIDIA runtime and
# test dependencies; on Debian as root, also ROCm's hipcc and HIP runtime for the AMD compile checks.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[cuda,hip,dev]"

if ! command -v hipcc >/dev/null 2>&1 || [ ! -e /usr/lib/x86_64-linux-gnu/libamdhip64.so.5 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's hipcc and libamdhip64-dev (AMD compile checks)..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hipcc libamdhip64-dev >/dev/null
  else
    echo "note: hipcc / libamdhip64 not installed (needs root + apt-get); the AMD compile tests will skip"
  fi
fi
echo "setup done: .venv ready"
