#!/usr/bin/env bash
# Set up a development environment in .venv: the package (editable) with its NVIDIA runtime, PostgreSQL
# driver and test dependencies; on Debian as root, also ROCm's hipcc and HIP runtime for the AMD
# compile checks and a PostgreSQL server for the PostgreSQL tests.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[cuda,hip,dev,postgres]"

# Debian packages, installed as root where apt-get exists (CI's fresh machine); otherwise a note.
apt_updated=0
apt_install() {  # apt_install WHAT PACKAGE...
  local what=$1
  shift
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's $* ($what)..."
    if [ "$apt_updated" = 0 ]; then
      apt-get update -qq
      apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "note: $* not installed (needs root + apt-get); the $what will skip"
  fi
}

if ! command -v hipcc >/dev/null 2>&1 || [ ! -e /usr/lib/x86_64-linux-gnu/libamdhip64.so.5 ]; then
  apt_install "AMD compile tests" hipcc libamdhip64-dev
fi
# A PostgreSQL server for the tests of a PostgreSQL tuning DB (they start a throwaway one of their own).
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt_install "PostgreSQL tests" postgresql
fi
echo "setup done: .venv ready"
