#!/usr/bin/env bash
# The pip wheel, as a user installs it into a Python image: build it (scripts/build-wheel.sh),
# install it offline (`pip install --no-index`) into a fresh venv that also holds a pip-installed
# vLLM wheel (the cached wheel of scripts/fetch-upstream.sh, `--no-deps`) and vllm_gaudi (copied
# into site-packages: it is not on a package index), then run the image flow through Python
# discovery (no --root: the venv's python3 is asked where the packages are):
#   apply --check → 1, apply → 0, apply --check → 0, revert → 0 and site-packages byte-identical,
#   and `gaudi-fixes completions bash` / `gaudi-fixes man` from the venv.
#   bash scripts/test-wheel.sh [RELEASE]        # default v0.30.0; exit 0 when everything held
# vLLM is installed with --no-compile: revert keeps .py files byte-identical; the .pyc files pip
# would compile are issue 18's (revert restores them) and are compared once that lands.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/heartbeat.sh
REL=${1:-v0.30.0}
CACHE=${GAUDI_FIXES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-fixes}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gaudi-fixes-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failed=0
ok() { echo "PASS: wheel: $*"; }
bad() { failed=1; echo "FAIL: wheel: $*"; }

wheel=$(bash scripts/build-wheel.sh | tail -n 1) || { bad "scripts/build-wheel.sh failed"; exit 1; }
ok "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
case $(basename "$wheel") in *py3-none-manylinux2014_x86_64*) ok "tagged py3-none-manylinux2014 (glibc ≥ 2.17)" ;;
  *) bad "unexpected tag: $(basename "$wheel")" ;; esac
# README's sizes line against this build's dist/sizes.json (tests/docs.rs; without a build it
# checks only that the figures are marked).
if cargo test --quiet --test main docs::readme_sizes_are_build_wheels_within_5_percent_of_the_last_build >/dev/null 2>&1; then
  ok "README's sizes are within 5% of this build ($(tr -d '\n ' < dist/sizes.json))"
else bad "README's sizes are more than 5% off this build: copy build-wheel.sh's sizes line (dist/sizes.json) into README"; fi

# Its own DEST: the shared cache of pristine trees is never rewritten by this script.
pristine=$(bash scripts/fetch-upstream.sh "$REL" "$WORK/pristine" | tail -n 1) || { bad "fetch vLLM $REL"; exit 1; }
vllm_wheel=$(compgen -G "$CACHE/wheels/vllm-${REL#v}-*.whl" | head -n 1)
[ -n "$vllm_wheel" ] || { bad "no cached vLLM $REL wheel in $CACHE/wheels"; exit 1; }

echo "wheel: fresh venv $WORK/venv: gaudi-fixes (--no-index), vLLM $REL (--no-deps, ~1 min), vllm_gaudi"
python3 -m venv "$WORK/venv" || { bad "python3 -m venv"; exit 1; }
VPY=$WORK/venv/bin/python
"$VPY" -m pip install --quiet --disable-pip-version-check --no-index "$wheel" \
  && ok "pip install --no-index $(basename "$wheel")" || { bad "pip install --no-index of the wheel"; exit 1; }
heartbeat 20 "wheel: pip install vllm $REL" "$VPY" -m pip install --quiet --disable-pip-version-check \
  --no-index --no-deps --no-compile "$vllm_wheel" || { bad "pip install --no-deps $vllm_wheel"; exit 1; }
SP=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ -d "$pristine/vllm_gaudi" ] || { bad "no vllm_gaudi for $REL (see scripts/fetch-upstream.sh)"; exit 1; }
cp -a "$pristine/vllm_gaudi" "$SP/"

snap() { (cd "$SP" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum); }
before=$(snap)
# What an image's RUN line sees: the venv first on PATH, no --root, no GAUDI_FIXES_ROOT.
gf() { (cd "$WORK" && env -u GAUDI_FIXES_ROOT PATH="$WORK/venv/bin:$PATH" gaudi-fixes "$@"); }
[ "$(cd "$WORK" && PATH="$WORK/venv/bin:$PATH" command -v gaudi-fixes)" = "$WORK/venv/bin/gaudi-fixes" ] \
  && ok "gaudi-fixes on PATH is the venv's ($(gf --version))" || bad "gaudi-fixes not installed into the venv"
step() {
  local want=$1 what=$2 got out; shift 2
  out=$(gf "$@" 2>&1); got=$?
  if [ "$got" = "$want" ]; then ok "$what (exit $got)"; else bad "$what: exit $got, expected $want"; echo "$out"; fi
}
step 1 "apply --check --profile performance on the pip-installed trees" apply --check --profile performance
gf status 2>&1 | grep -q "found by python3" && ok "trees found through python3's find_spec" \
  || { bad "status does not say the trees were found by python3"; gf status; }
step 0 "apply --profile performance" apply --profile performance
step 0 "apply --check after apply" apply --check --profile performance
step 0 "revert --profile performance" revert --profile performance
if [ "$before" = "$(snap)" ]; then ok "revert left site-packages byte-identical"; else bad "site-packages differs after revert"; fi
gf completions bash | grep -q -- "-F _clap_complete_gaudi_fixes gaudi-fixes" && ok "completions bash from the venv" || bad "completions bash"
gf man | grep -q '^\.TH GAUDI-FIXES 1' && ok "man from the venv" || bad "man"
exit "$failed"
