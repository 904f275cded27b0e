#!/usr/bin/env bash
# Build the pip wheel of gaudi-fixes (default features: no libtorch) into dist/, as a manylinux2014
# wheel (glibc >= 2.17, so Ubuntu 22.04 images with glibc 2.35 take it; this machine's own glibc
# would tag a native build too new). maturin 1.16.0 and ziglang come from the package index into a
# build venv in the user cache, made on the first run and reused after.
#   bash scripts/build-wheel.sh            # last line: the wheel's path
# It prints the sizes of what it built (the wheel, the binary inside it, the newest glibc symbol the
# binary needs) on stderr, as README's sizes line reads, and writes them to dist/sizes.json, which
# tests/docs.rs holds README's figures to (within 5%).
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
rm -f dist/gaudi-fixes-*.whl dist/gaudi_fixes-*.whl dist/sizes.json
echo "build-wheel: compiling gaudi-fixes (release, default features) for manylinux2014 x86_64 with zig; ~1-3 min" >&2
# cargo's own progress lines go to stderr: the build is never silent.
PATH="$BUILD_VENV/bin:$PATH" heartbeat 20 "build-wheel: maturin build (rustc compiling gaudi-fixes)" maturin build --release --locked --zig --compatibility manylinux2014 \
  --out dist >&2
wheel=$(ls dist/gaudi_fixes-*.whl)
# The sizes, measured here and nowhere else: README's line is copied from what this prints.
python3 - "$wheel" <<'PY' >&2
import json, os, re, subprocess, sys, tempfile, time, zipfile
wheel = sys.argv[1]
with zipfile.ZipFile(wheel) as z:
    info = next(i for i in z.infolist() if i.filename.endswith("/scripts/gaudi-fixes"))
    binary = info.file_size
    glibc = None
    with tempfile.TemporaryDirectory() as tmp:
        path = z.extract(info, tmp)
        try:
            symbols = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
            versions = [tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([0-9.]+)", symbols)]
            glibc = ".".join(map(str, max(versions))) if versions else None
        except (OSError, subprocess.CalledProcessError):
            pass
sizes = {"wheel": os.path.basename(wheel), "wheel_bytes": os.path.getsize(wheel), "binary_bytes": binary,
         "newest_glibc": glibc, "built": time.strftime("%Y-%m-%d")}
json.dump(sizes, open(os.path.join(os.path.dirname(wheel), "sizes.json"), "w"), indent=1)
mb = lambda n: f"{n / 1e6:.2f} MB ({n:,} bytes)"
print(f"build-wheel: {sizes['wheel']}")
print(f"build-wheel: sizes (README's line): a {mb(sizes['wheel_bytes'])} wheel holding a {mb(binary)} binary, "
      f"newest glibc symbol {glibc or 'unknown (no objdump)'}, built {sizes['built']}")
PY
echo "$PWD/$wheel"
