#!/usr/bin/env bash
# The main job on a real vLLM tree, from nothing: build gaudi-fixes (or reuse a build that is up
# to date), fetch vLLM RELEASE from the
# package index into the cache, and on a copy of it run what an image build and its CI run:
#   apply --check (1: not applied) → apply → apply --check (0) → apply again (no-op) → status
#   → revert (byte-identical to the pristine release) → a hand edit inside a hunk: --check
#   says drifted (2) with the diff, apply refuses (2) and writes nothing.
#   bash scripts/try-on-vllm.sh [RELEASE] [PROFILE]     # default v0.26.0 performance
# vllm_gaudi comes from GAUDI_FIXES_VLLM_GAUDI_SRC (a vllm-gaudi checkout) or, in this
# repository, the pristine archives in ../shared/upstream (scripts/fetch-upstream.sh); with
# neither only the vllm half is applied (--only-tree vllm), and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
REL=${1:-v0.26.0}
PROFILE=${2:-performance}
. scripts/heartbeat.sh
# An existing build is reused when nothing it is made from is newer: GAUDI_FIXES_BIN, the wheel's
# (scripts/build-wheel.sh leaves it under target/<triple>/release), or cargo's own; otherwise
# cargo builds one (release, default features: the CLI with its built-in catalogue, no libtorch).
BIN=
for cand in ${GAUDI_FIXES_BIN:-} target/x86_64-unknown-linux-gnu/release/gaudi-fixes target/release/gaudi-fixes; do
  [ -x "$cand" ] || continue
  if [ "$cand" = "${GAUDI_FIXES_BIN:-}" ] \
    || [ -z "$(find src fixes profiles build.rs Cargo.toml Cargo.lock -newer "$cand" -print -quit)" ]; then
    BIN=$(cd "$(dirname "$cand")" && pwd)/$(basename "$cand"); break
  fi
done
if [ -n "$BIN" ]; then
  echo "reusing $BIN (built after every source and fix; GAUDI_FIXES_BIN=... names another)"
else
  echo "building gaudi-fixes (release, default features; ~2 min on a first build, seconds after)"
  heartbeat 20 "try-on-vllm: cargo build --release" cargo build --release --quiet
  BIN=$PWD/target/release/gaudi-fixes
fi
"$BIN" --version
pristine=$(bash scripts/fetch-upstream.sh "$REL" | tail -n 1)
tree=$(mktemp -d "${TMPDIR:-/tmp}/gaudi-fixes-try.XXXXXX")
cp -a "$pristine/." "$tree/"
only=()
if [ ! -d "$tree/vllm_gaudi" ]; then
  echo "note: no vllm_gaudi tree (set GAUDI_FIXES_VLLM_GAUDI_SRC); applying the vllm half only" >&2
  only=(--only-tree vllm)
fi
run() { echo; echo "\$ gaudi-fixes --root $tree ${only[*]} $*"; "$BIN" --root "$tree" "${only[@]}" "$@"; echo "(exit $?)"; }
set +e
run apply --check --profile "$PROFILE"
run apply --profile "$PROFILE"
run apply --check --profile "$PROFILE"
run apply --profile "$PROFILE"
run status
run revert --profile "$PROFILE"
# What drift looks like: one line inside a hunk's context edited by hand.
f=$tree/vllm/v1/sample/ops/topk_topp_sampler.py
cp -p "$f" "$tree/.orig"
sed -i 's/^        self.use_fp64_gumbel = use_fp64_gumbel$/        self.use_fp64_gumbel = bool(use_fp64_gumbel)/' "$f"
echo; echo "(edited one line of $f by hand)"
run apply --check --profile "$PROFILE"
run apply --profile "$PROFILE"
mv "$tree/.orig" "$f"
set -e
if diff -r "$pristine" "$tree" >/dev/null; then
  echo; echo "revert restored every byte of $REL ($tree)"
else
  echo; echo "tree differs from the pristine release after revert:" >&2; diff -rq "$pristine" "$tree" | head >&2; exit 1
fi
rm -rf "$tree"
