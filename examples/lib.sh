# lib.sh: what examples/churn.sh and examples/hold.sh share. Sourced, not
# run. Before sourcing, a script sets:
#   work       a temporary directory (removed on exit)
#   pid        an associative array, process name -> pid (killed on exit)
#   port_base  the name of the variable that moves the script's ports
#   proxy      the proxy's base URL, on proxy_port
#   admin      the admin listener's base URL, on admin_port
# shellcheck shell=bash

cleanup() {
  local name p
  for name in "${!pid[@]}"; do
    kill "${pid[$name]}" 2>/dev/null || true
  done
  for name in "${!pid[@]}"; do
    p=${pid[$name]}
    for _ in $(seq 50); do # up to 5 s each to drain, then kill -9
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '\n== %s\n' "$*"; }

fail() {
  printf '\nFAIL: %s\n' "$*" >&2
  if [ -f "$work/ringlb.log" ]; then
    printf -- '--- last lines of the ringlb log:\n' >&2
    tail -n 20 "$work/ringlb.log" >&2
  fi
  exit 1
}

# wait_until SECONDS WHAT COMMAND...: run COMMAND every 0.1 s until it
# succeeds; fail after SECONDS.
wait_until() {
  local secs=$1 what=$2 i
  shift 2
  for ((i = 0; i < secs * 10; i++)); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  fail "$what: not after ${secs}s"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# need_port PORT: fail unless PORT is free.
need_port() { port_free "$1" || fail "port $1 is taken (set $port_base to use other ports)"; }

# start_upstream NAME PORT: a demo upstream (built into $work/upstream).
start_upstream() {
  need_port "$2"
  "$work/upstream" -name "$1" -listen "127.0.0.1:$2" >>"$work/$1.log" 2>&1 &
  pid[$1]=$!
  wait_until 20 "$1 listening on 127.0.0.1:$2" curl -fsS -m 5 "http://127.0.0.1:$2/healthz"
}

# start_ringlb: ringlb serving $work/ringlb.yaml, once it is ready.
start_ringlb() {
  need_port "$proxy_port"
  need_port "$admin_port"
  "$work/ringlb" serve -config "$work/ringlb.yaml" >"$work/ringlb.log" 2>&1 &
  pid[ringlb]=$!
  wait_until 20 "ringlb ready on $admin/readyz" curl -fsS -m 5 "$admin/readyz"
}

# build: ringlb and the demo upstream into $work.
build() {
  command -v go >/dev/null || fail "go is not on PATH"
  command -v curl >/dev/null || fail "curl is not on PATH"
  say "Building ringlb and the demo upstream into $work"
  (cd "$repo" && go build -o "$work/ringlb" ./cmd/ringlb && go build -o "$work/upstream" ./examples/upstream) ||
    fail "go build failed"
}

declare -A up=() visit=() prev_up=() prev_visit=() note=()

# visit USER: one request for USER; records where it went and its visit
# count, keeping the previous ones in prev_up and prev_visit. The upstream
# that answered names itself in the body; ringlb names the upstream it
# chose in the X-Upstream header; they must agree.
visit() {
  local u=$1 out via
  prev_up[$u]=${up[$u]:-}
  prev_visit[$u]=${visit[$u]:-0}
  out=$(curl -fsS -m 5 -D "$work/headers" "$proxy/?user=$u") || fail "request for $u failed"
  [[ $out =~ ^user\ (.+):\ visit\ ([0-9]+)\ on\ (.+)$ ]] || fail "unexpected answer for $u: $out"
  [ "${BASH_REMATCH[1]}" = "$u" ] || fail "asked for $u, the upstream saw ${BASH_REMATCH[1]}"
  visit[$u]=${BASH_REMATCH[2]}
  up[$u]=${BASH_REMATCH[3]}
  via=$(tr -d '\r' <"$work/headers" | awk 'tolower($1) == "x-upstream:" { print $2 }')
  [ "$via" = "${up[$u]}" ] || fail "$u: ringlb says X-Upstream: $via, but ${up[$u]} answered"
  note[$u]=""
}

# stayed U: U is where it was and its count went up by one.
stayed() { [ "${up[$1]}" = "${prev_up[$1]}" ] && [ "${visit[$1]}" -eq $((${prev_visit[$1]} + 1)) ]; }

bad=()
# check USER WHAT COMMAND...: unless COMMAND succeeds, USER is flagged
# with WHAT in the table.
check() {
  if ! "${@:3}"; then
    bad+=("$1")
    note[$1]="${note[$1]}  <-- WRONG: $2"
  fi
}
