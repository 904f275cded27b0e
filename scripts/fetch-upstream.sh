#!/usr/bin/env bash
# fetch-upstream.sh RELEASE [DEST]
#
# Make a pristine upstream tree to apply and test gaudi-fixes on:
#   DEST/vllm/         the vllm/ package of the vLLM wheel RELEASE (v0.26.0 or 0.26.0),
#                      without its compiled files (ELF: the CUDA extensions, vllm-rs; ~630 MB
#                      of the ~810 MB): no fix patches them and nothing on CPU loads them.
#                      GAUDI_FIXES_KEEP_BINARIES=1 keeps them.
#   DEST/vllm_gaudi/   copied from $GAUDI_FIXES_VLLM_GAUDI_SRC/vllm_gaudi when that is set;
#                      otherwise extracted from the pristine vllm_gaudi archives in
#                      $GAUDI_FIXES_VLLM_GAUDI_ARCHIVES (default: ../shared/upstream beside
#                      this repository): vllm_gaudi-v0.26.0.tar.gz for vLLM 0.26.x, the newest
#                      vllm_gaudi-main-*.tar.gz for later releases (main of 2026-08-21
#                      imports what vLLM 0.27/0.28 provide; its files the fixes patch are
#                      also the nearest to 0.29-0.33). Neither available: no vllm_gaudi/,
#                      and the script says so (vllm_gaudi is not on any package index).
#
# The wheel is downloaded once with `pip download --no-deps` into
# ${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes/wheels and reused. Every run writes a
# fresh copy: it is built in a temporary directory beside DEST and renamed into place,
# so DEST never holds a half-extracted tree. An existing DEST is replaced only if an
# earlier run of this script made it (it holds .gaudi-fixes-upstream).
#
# DEST defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes/upstream/vX.Y.Z.
# The last line on stdout is DEST, e.g.  GAUDI_FIXES_ROOT=$(scripts/fetch-upstream.sh v0.26.0 | tail -n1)
# Environment: PYTHON (default python3, needs pip), GAUDI_FIXES_VLLM_GAUDI_SRC,
# GAUDI_FIXES_VLLM_GAUDI_ARCHIVES, GAUDI_FIXES_KEEP_BINARIES.
set -euo pipefail
# shellcheck source=heartbeat.sh
. "$(dirname "$0")/heartbeat.sh"

prog=fetch-upstream
die() { echo "$prog: error: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }

[[ $# -ge 1 && $# -le 2 ]] || die "usage: $0 RELEASE [DEST]   (RELEASE like v0.26.0 or 0.26.0)"
version=${1#v}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+((\.post|rc)[0-9]+)?$ ]] \
    || die "'$1' is not a release like v0.26.0 or 0.26.0"
release=v$version

python=${PYTHON:-python3}
command -v "$python" >/dev/null || die "$python not found (set PYTHON)"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes
wheels=$cache/wheels
dest=${2:-$cache/upstream/$release}
marker=.gaudi-fixes-upstream

if [[ -e $dest ]]; then
    [[ -d $dest ]] || die "$dest exists and is not a directory"
    if [[ -n $(ls -A "$dest") && ! -f $dest/$marker ]]; then
        die "$dest is not empty and was not made by $prog; refusing to replace it"
    fi
fi

gaudi_src=${GAUDI_FIXES_VLLM_GAUDI_SRC:-}
if [[ -n $gaudi_src && ! -d $gaudi_src/vllm_gaudi ]]; then
    die "GAUDI_FIXES_VLLM_GAUDI_SRC=$gaudi_src has no vllm_gaudi/ directory"
fi
archives=${GAUDI_FIXES_VLLM_GAUDI_ARCHIVES:-$(cd "$(dirname "$0")/.." && pwd)/../shared/upstream}
gaudi_archive=""
if [[ -z $gaudi_src ]]; then
    IFS=. read -r major minor _ <<<"$version"
    if [[ $major == 0 && $minor == 26 ]]; then
        candidate=$archives/vllm_gaudi-v0.26.0.tar.gz
    elif (( major > 0 || minor > 26 )); then
        candidate=$(compgen -G "$archives/vllm_gaudi-main-*.tar.gz" | sort | tail -n1 || true)
        candidate=${candidate:-$archives/vllm_gaudi-main-*.tar.gz}
    else
        candidate=""
    fi
    [[ -n $candidate && -f $candidate ]] && gaudi_archive=$candidate
fi

mkdir -p "$wheels" || die "cannot create $wheels"
find_wheel() { compgen -G "$wheels/vllm-$version-*.whl" | head -n1 || true; }
wheel=$(find_wheel)
if [[ -z $wheel ]]; then
    note "downloading the vLLM $version wheel (~300 MB) into $wheels"
    heartbeat 20 "$prog: pip download vllm==$version" "$python" -m pip download --progress-bar off --no-deps --only-binary=:all: --dest "$wheels" "vllm==$version" >&2 \
        || die "pip download vllm==$version failed"
    wheel=$(find_wheel)
    [[ -n $wheel ]] || die "pip download did not leave a vllm-$version-*.whl in $wheels"
else
    note "using cached $wheel"
fi

parent=$(dirname "$dest")
mkdir -p "$parent" || die "cannot create $parent"
tmp=$(mktemp -d "$parent/.$prog.XXXXXX") || die "cannot create a temporary directory in $parent"
old=""
cleanup() { rm -rf "$tmp" ${old:+"$old"}; }
trap cleanup EXIT

"$python" - "$wheel" "$tmp" <<'PY' || die "cannot extract vllm/ from $wheel"
import os, sys, zipfile

wheel, out = sys.argv[1], sys.argv[2]
keep_binaries = os.environ.get("GAUDI_FIXES_KEEP_BINARIES") == "1"
count = left = left_bytes = 0
with zipfile.ZipFile(wheel) as zf:
    for info in zf.infolist():
        name = info.filename
        parts = name.split("/")
        if parts[0] != "vllm" or ".." in parts or os.path.isabs(name):
            continue
        if not keep_binaries and not info.is_dir():
            with zf.open(info) as f:
                if f.read(4) == b"\x7fELF":  # a compiled extension or executable
                    left += 1
                    left_bytes += info.file_size
                    continue
        zf.extract(info, out)
        count += 1
if not os.path.isfile(os.path.join(out, "vllm", "__init__.py")):
    sys.exit(f"{wheel}: no vllm/__init__.py in the wheel")
print(f"extracted {count} entries of vllm/", file=sys.stderr)
if left:
    print(f"left out {left} compiled files of vllm/ ({left_bytes >> 20} MiB: CUDA kernels and"
          " executables; no fix patches them and nothing on CPU loads them;"
          " GAUDI_FIXES_KEEP_BINARIES=1 keeps them)", file=sys.stderr)
PY

if [[ -n $gaudi_src ]]; then
    "$python" - "$gaudi_src/vllm_gaudi" "$tmp/vllm_gaudi" <<'PY' || die "cannot copy $gaudi_src/vllm_gaudi"
import shutil, sys

shutil.copytree(sys.argv[1], sys.argv[2], ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
PY
    note "copied vllm_gaudi/ from $gaudi_src"
elif [[ -n $gaudi_archive ]]; then
    "$python" - "$gaudi_archive" "$tmp" <<'PY' || die "cannot extract vllm_gaudi/ from $gaudi_archive"
import os, sys, tarfile

archive, out = sys.argv[1], sys.argv[2]
count = 0
with tarfile.open(archive) as tf:
    for member in tf.getmembers():
        parts = member.name.split("/")
        if parts[0] != "vllm_gaudi" or ".." in parts or os.path.isabs(member.name):
            continue
        if not (member.isfile() or member.isdir()):
            continue  # no links or devices from an archive
        tf.extract(member, out, set_attrs=False)
        count += 1
if not os.path.isfile(os.path.join(out, "vllm_gaudi", "__init__.py")):
    sys.exit(f"{archive}: no vllm_gaudi/__init__.py in the archive")
print(f"extracted {count} entries of vllm_gaudi/", file=sys.stderr)
PY
    note "vllm_gaudi/ from $gaudi_archive"
else
    note "vllm_gaudi is absent: GAUDI_FIXES_VLLM_GAUDI_SRC is unset and no vllm_gaudi archive for $release" \
        "in $archives (want ${candidate:-none for releases before 0.26}); set GAUDI_FIXES_VLLM_GAUDI_SRC to a" \
        "directory holding vllm_gaudi/ to include it"
fi

printf 'release: %s\nwheel: %s\nvllm_gaudi: %s\ncompiled files: %s\n' "$release" "$(basename "$wheel")" \
    "${gaudi_src:-${gaudi_archive:-absent}}" \
    "$([[ ${GAUDI_FIXES_KEEP_BINARIES:-} == 1 ]] && echo kept || echo left out)" > "$tmp/$marker"

# rename(2) cannot replace a non-empty directory: move the old tree aside first.
if [[ -e $dest ]]; then
    old=$tmp.old
    mv "$dest" "$old" || die "cannot move the old $dest aside"
fi
if ! mv "$tmp" "$dest"; then
    [[ -z $old ]] || { mv "$old" "$dest" && old=""; }
    die "cannot move the new tree to $dest"
fi
note "pristine $release tree in $dest"
echo "$dest"
