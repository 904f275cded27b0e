# Sourced by the scripts: `heartbeat SECONDS WHAT CMD...` runs CMD and, while it runs, prints
# "WHAT: still running (N s)" on stderr every SECONDS, so no phase of a script is silent for
# longer than that (a log reader can tell a long download or build from a hang).
heartbeat() {
  local every=$1 what=$2 start rc=0 hb
  shift 2
  start=$(date +%s)
  ( while sleep "$every"; do echo "$what: still running ($(( $(date +%s) - start )) s)" >&2; done ) &
  hb=$!
  "$@" || rc=$?
  kill "$hb" 2>/dev/null || true
  wait "$hb" 2>/dev/null || true  # a killed ticker reports 143: not a failure (set -e callers)
  return "$rc"
}
