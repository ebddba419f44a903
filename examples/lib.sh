# lib.sh: what the example scripts (churn.sh, hold.sh, hold-shared.sh,
# rolling-restart.sh) share. Sourced, not run: a script sets repo (the
# repository's root), sources this file and calls
#
#   example_init NAME PORT_VAR DEFAULT_BASE
#
# which sets
#   base       the first port: $PORT_VAR, else DEFAULT_BASE
#   port_base  PORT_VAR, the name of the variable that moves the ports
#   work       a temporary directory (removed on exit)
#   proxy_port, admin_port  BASE+8 and BASE+9 unless the script set them
#   proxy      the proxy's base URL, on proxy_port
#   admin      the admin listener's base URL, on admin_port
# pid, an associative array of process name -> pid, is killed on exit.
# shellcheck shell=bash

declare -A pid=()

example_init() {
  port_base=$2
  base=${!2:-$3}
  proxy_port=${proxy_port:-$((base + 8))}
  admin_port=${admin_port:-$((base + 9))}
  proxy=http://127.0.0.1:$proxy_port
  admin=http://127.0.0.1:$admin_port
  work=$(mktemp -d "${TMPDIR:-/tmp}/ringlb-$1.XXXXXX")
}
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
  [ -z "${work:-}" ] || rm -rf "$work"
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

# start_upstream NAME PORT [FLAGS...]: a demo upstream (built into
# $work/upstream), given FLAGS too.
start_upstream() {
  need_port "$2"
  "$work/upstream" -name "$1" -listen "127.0.0.1:$2" "${@:3}" >>"$work/$1.log" 2>&1 &
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

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
# secs MS: MS milliseconds as "1.2s"; since START: the time since START (now_ms).
secs() { printf '%d.%ds' $(($1 / 1000)) $((($1 % 1000) / 100)); }
since() { secs $(($(now_ms) - $1)); }

# field JSON NAME: the value of NAME in a flat JSON object ("null" for null).
field() { grep -o "\"$2\": *[^,}]*" <<<"$1" | head -n 1 | sed 's/^[^:]*: *//; s/"//g'; }

# lookup KEY FIELD: FIELD ("owner", "held", "chosen", ...) of
# /debug/lookup for KEY.
lookup() { field "$(curl -fsS -m 5 "$admin/debug/lookup?key=$1")" "$2"; }

# metric NAME [ADMIN]: the sum of NAME's series (every pool's) on ADMIN
# (default $admin); 0 when there is none.
metric() {
  curl -fsS -m 5 "${2:-$admin}/metrics" |
    awk -v want="$1" '{ n = $1; sub(/\{.*/, "", n) } n == want { s += $2; f = 1 } END { print (f ? s : 0) }'
}

# config_head NAME LISTEN_PORT ADMIN_PORT: the start of a script's config:
# listeners, the upstream header, and users keyed on the query parameter
# user (a request without one gets 400).
config_head() {
  cat <<EOF
# Written by examples/$1.
listen: 127.0.0.1:$2
admin_listen: 127.0.0.1:$3
upstream_header: X-Upstream
hash:
  key:
    - query: user
  on_missing: reject
EOF
}

# upstream_entries N: the upstreams app-1..app-N on BASE+1..BASE+N.
upstream_entries() {
  local i
  echo "upstreams:"
  for ((i = 1; i <= $1; i++)); do
    printf '  - name: app-%d\n    url: http://127.0.0.1:%d\n' "$i" $((base + i))
  done
}

# reload ADMIN [WHERE]: POST ADMIN/reload, failing unless 200; sets reply
# to the answer without its status.
reload() {
  reply=$(curl -sS -m 5 -w ' %{http_code}' -X POST "$1/reload") || fail "POST /reload${2:+ on $2}: no answer"
  reply=$(tr -d '\n ' <<<"$reply")
  [[ $reply == *200 ]] || fail "POST /reload${2:+ on $2}: $reply"
  reply=${reply%200}
}

# load_url I: where background request I goes (a script may redefine it).
load_url() { echo "$proxy/?user=load-$1"; }

# start_load: a loop of requests for 20 other users until stop_load.
start_load() {
  (
    ok=0 failed=0
    trap 'echo "$ok $failed" >"$work/load"; exit 0' TERM
    while :; do
      for i in $(seq 20); do
        if curl -fsS -m 5 -o /dev/null "$(load_url "$i")"; then ok=$((ok + 1)); else failed=$((failed + 1)); fi
      done
    done
  ) &
  pid[load]=$!
}

# stop_load: stops the loop; sets load_ok and load_failed.
stop_load() {
  kill "${pid[load]}"
  wait "${pid[load]}" 2>/dev/null || true
  unset "pid[load]"
  read -r load_ok load_failed <"$work/load"
}

# round USERS...: one request per user (visit), keeping the previous
# upstream and count in prev_up and prev_visit.
round() {
  local u
  for u in "$@"; do
    visit "$u"
  done
}
