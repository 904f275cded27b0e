# Sourced by the scripts: `heartbeat SECONDS WHAT CMD...` runs CMD and, while it runs, prints
# "WHAT: still running (N s)" on stderr every SECONDS, so no phase of a script is silent for
# longer than that (a log reader can tell a long download or build from a hang).
# The ticker is ended whole when CMD ends: its `sleep` is killed with it, and holds neither the
# caller's stdout nor its stderr, so `heartbeat … | cat` or `$(script | tail -n 1)` returns as
# soon as CMD does (an orphaned `sleep` used to keep the pipe open for up to SECONDS).
heartbeat() {
  local every=$1 what=$2 start rc=0 hb
  shift 2
  start=$(date +%s)
  (
    s=
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    while :; do
      sleep "$every" </dev/null >/dev/null 2>&1 &
      s=$!
      wait "$s"
      echo "$what: still running ($(( $(date +%s) - start )) s)" >&2
    done
  ) </dev/null >/dev/null &
  hb=$!
  "$@" || rc=$?
  kill "$hb" 2>/dev/null || true
  wait "$hb" 2>/dev/null || true  # a killed ticker reports 143: not a failure (set -e callers)
  return "$rc"
}
