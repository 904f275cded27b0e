#!/usr/bin/env bash
# Build the pip wheel of gaudi-fixes (default features: no libtorch) into dist/, as a manylinux2014
# wheel (glibc >= 2.17, so Ubuntu 22.04 images with glibc 2.35 take it; this machine's own glibc
# would tag a native build too new). maturin 1.16.0 and ziglang come from the package index into a
# build venv in the user cache, made on the first run and reused after.
#   bash scripts/build-wheel.sh            # last line: the wheel's path
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/heartbeat.sh
CACHE=${GAUDI_FIXES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes}
BUILD_VENV=$CACHE/build-venv
MATURIN_VERSION=1.16.0
if ! "$BUILD_VENV/bin/maturin" --version 2>/dev/null | grep -qx "maturin $MATURIN_VERSION" \
  || ! "$BUILD_VENV/bin/python" -c 'import ziglang' 2>/dev/null; then
  echo "build-wheel: making the build venv $BUILD_VENV (maturin $MATURIN_VERSION, ziglang from the package index)" >&2
  python3 -m venv "$BUILD_VENV"
  heartbeat 20 "build-wheel: pip install maturin ziglang" \
    "$BUILD_VENV/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION" ziglang >&2
fi
rm -f dist/gaudi-fixes-*.whl dist/gaudi_fixes-*.whl
echo "build-wheel: compiling gaudi-fixes (release, default features) for manylinux2014 x86_64 with zig; ~1-3 min" >&2
# cargo's own progress lines go to stderr: the build is never silent.
PATH="$BUILD_VENV/bin:$PATH" heartbeat 20 "build-wheel: maturin build (rustc compiling gaudi-fixes)" maturin build --release --locked --zig --compatibility manylinux2014 \
  --out dist >&2
wheel=$(ls dist/gaudi_fixes-*.whl)
echo "build-wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))" >&2
echo "$PWD/$wheel"
