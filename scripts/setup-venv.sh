#!/usr/bin/env bash
# Create (or reuse) the Python venv that the `reference` feature builds and links against:
# torch==2.13.0 (the libtorch that tch 0.26.0 expects), numpy and pytest (for the fixes' CPU
# tests and the emitted test vectors).
#
#   bash scripts/setup-venv.sh            # prints the venv path as its last line
#   PATH="$(bash scripts/setup-venv.sh | tail -n1)/bin:$PATH" LIBTORCH_USE_PYTORCH=1 \
#       cargo build --release --features reference
#
# Location: $GAUDI_FIXES_VENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes/venv.
# Idempotent: a venv whose python already imports torch 2.13.0, numpy and pytest is reused
# (only the conformance suite's pinned packages are added when one is missing). The torch wheel from the package index is the CUDA build (~2.6 GB download,
# ~4.7 GB installed) because the CPU-only wheel is not on the default index; `--no-deps`
# cannot be used since libtorch_cpu.so itself needs libcudart/libcupti from the NVIDIA wheels.
set -euo pipefail
# shellcheck source=heartbeat.sh
. "$(dirname "$0")/heartbeat.sh"

TORCH_VERSION="2.13.0"
VENV="${GAUDI_FIXES_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes/venv}"
PYTHON="${PYTHON:-python3}"

die() {
    echo "setup-venv: error: $*" >&2
    exit 1
}

# True when the venv's python imports everything at the right versions.
venv_ok() {
    [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/python" - "$TORCH_VERSION" >/dev/null 2>&1 <<'PY'
import sys
import torch, numpy, pytest  # noqa: F401
assert torch.__version__.startswith(sys.argv[1]), torch.__version__
PY
}

# vLLM's pure-Python dependencies for the conformance suite (`gaudi-fixes conform`), pinned,
# installed WITHOUT their dependencies so no second torch arrives; pip leaves satisfied pins alone.
conform_deps() {
    local req
    req="$(dirname "$0")/../fixes/_support/requirements.txt"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q --no-deps -r "$req" >&2 \
        || die "pip install --no-deps -r $req into $VENV failed (network?)"
    venv_ok || die "installing $req changed $VENV's torch; it must stay torch $TORCH_VERSION"
}

if venv_ok; then
    echo "setup-venv: reusing $VENV (torch $TORCH_VERSION importable)" >&2
    conform_deps
    echo "$VENV"
    exit 0
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found; set PYTHON=/path/to/python3 (3.10+)"

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup-venv: creating $VENV" >&2
    mkdir -p "$(dirname "$VENV")" || die "cannot create $(dirname "$VENV")"
    "$PYTHON" -m venv "$VENV" \
        || die "'$PYTHON -m venv $VENV' failed (on Debian/Ubuntu: apt-get install python3-venv)"
else
    # A venv that exists but fails the import check is repaired in place, not deleted:
    # the user may have put other packages in it.
    echo "setup-venv: $VENV exists but does not import torch $TORCH_VERSION; installing into it" >&2
fi

echo "setup-venv: installing torch==$TORCH_VERSION (CUDA build from the package index: ~2.6 GB download," \
    "~4.7 GB installed, a few minutes), numpy, pytest" >&2
heartbeat 20 "setup-venv: pip install torch==$TORCH_VERSION numpy pytest" \
    "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off --no-cache-dir \
    "torch==$TORCH_VERSION" numpy pytest >&2 \
    || die "pip install torch==$TORCH_VERSION numpy pytest into $VENV failed (network? disk space: ~5 GB needed)"

venv_ok || die "$VENV/bin/python still cannot import torch $TORCH_VERSION, numpy and pytest after install"
conform_deps

echo "setup-venv: ready: $VENV" >&2
echo "$VENV"
