#!/usr/bin/env bash
# rolling-restart.sh: restart every upstream of a stateful fleet, one after
# the other, under load, without failing a request or losing a session.
# It needs bash, curl and Go, and runs from any directory:
#
#   bash examples/rolling-restart.sh
#
# It builds ringlb and the demo upstream (examples/upstream, which answers
# "user U: visit N on NAME" and keeps the counts in memory: a restarted
# upstream has forgotten every session), starts four upstreams and ringlb
# with `hold: {idle: 2s}`, and lets twelve users visit in the background
# for the whole run. Each user runs one session after another, each session
# five visits under a key of its own, so its count must go 1, 2, 3, 4, 5: a
# count that starts over means the session was lost. Sessions keep starting
# throughout, also while an upstream is drained. Then, for each upstream in
# turn:
#
#   1. POST /upstreams/NAME/drain: new sessions go elsewhere, those in use
#      stay on it;
#   2. wait until GET /upstreams/NAME says "drained": its sessions ended,
#      their holds went idle, nothing is in flight (or fail after 30 s);
#   3. stop it and start it again on its port (it has forgotten everything:
#      nobody is on it any more), and wait for ringlb to see it up;
#   4. POST /upstreams/NAME/ready. Its keys not in use come back; the
#      sessions that began on a neighbour while it was out stay there until
#      they end (hold.on_return: stay, the default).
#
# It exits 1 if any request failed or any session's count started over, and
# cleans up every process it started. ROLL_ON_RETURN=home runs it under the
# other return rule, where ready brings back every key of the upstream, in
# use or not: then the sessions that began during a drain start over, and
# it fails. Ports: ROLL_PORT_BASE (default 19400); upstreams listen on
# BASE+1..BASE+4, the proxy on BASE+8, the admin listener on BASE+9.
set -euo pipefail

idle=2        # seconds: hold.idle
per_session=5 # visits per session
on_return=${ROLL_ON_RETURN:-stay}
users=(alice bob carol dave erin frank grace heidi ivan judy mallory oscar)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=examples/lib.sh
. "$repo/examples/lib.sh"
example_init roll ROLL_PORT_BASE 19400

state_of() { curl -fsS -m 5 "$admin/upstreams/$1"; }

# post_state NAME STATE: POST /upstreams/NAME/STATE, failing unless 200.
post_state() {
  local reply
  reply=$(curl -sS -m 5 -w '\n%{http_code}' -X POST "$admin/upstreams/$1/$2") || fail "POST /upstreams/$1/$2: no answer"
  [ "${reply##*$'\n'}" = 200 ] || fail "POST /upstreams/$1/$2: ${reply//$'\n'/ }"
  printf '%s' "${reply%$'\n'*}"
}

write_config() {
  {
    config_head rolling-restart.sh "$proxy_port" "$admin_port"
    printf 'hold:\n  idle: %ss\n  on_return: %s\n' "$idle" "$on_return"
    upstream_entries 4
    cat <<EOF
health:
  path: /healthz
  interval: 200ms
  timeout: 150ms
retries: 1
EOF
  } >"$work/ringlb.yaml"
}

# user NAME: sessions one after another, until TERM; then it writes
# "sessions visits failed lost out" to $work/user-NAME, out counting the
# sessions that began while an upstream was out ($work/out exists from
# its drain to its ready).
user() {
  local name=$1 s=0 v out n sessions=0 visits=0 failed=0 lost=0 during=0
  trap 'echo "$sessions $visits $failed $lost $during" >"$work/user-$name"; exit 0' TERM
  while :; do
    s=$((s + 1))
    [ -e "$work/out" ] && during=$((during + 1))
    for ((v = 1; v <= per_session; v++)); do
      if ! out=$(curl -fsS -m 5 "$proxy/?user=$name.$s" 2>>"$work/failures"); then
        failed=$((failed + 1))
        echo "$name.$s visit $v: request failed" >>"$work/failures"
        continue
      fi
      n=${out#*visit }
      n=${n%% on *}
      if [ "$n" != "$v" ]; then
        lost=$((lost + 1))
        echo "$name.$s: visit $v was counted as $n ($out)" >>"$work/lost"
        break
      fi
      visits=$((visits + 1))
      sleep 0.1
    done
    sessions=$((sessions + 1))
  done
}

# drained NAME: /upstreams/NAME says drained.
drained() { [ "$(field "$(state_of "$1")" drained)" = true ]; }
available() { [ "$(field "$(state_of "$1")" available)" = true ]; }

# new_key_of NAME: a key NAME owns that no session uses.
new_key_of() {
  local i
  for i in $(seq 1000); do
    if [ "$(lookup "probe-$i" owner)" = "$1" ]; then
      echo "probe-$i"
      return
    fi
  done
  fail "no key of $1 among 1000"
}

build

say "Four demo upstreams and ringlb with hold idle ${idle}s, on_return $on_return; twelve users visit in the background"
for i in 1 2 3 4; do
  start_upstream "app-$i" $((base + i))
done
write_config
start_ringlb
echo "   each session: $per_session visits under a key of its own; its count must go 1 to $per_session"
for u in "${users[@]}"; do
  user "$u" &
  pid[user-$u]=$!
done
sleep 1

declare -A held_at=() took=()
for i in 1 2 3 4; do
  name=app-$i
  say "$name: drain, wait until drained, restart, ready"
  start=$(now_ms)
  touch "$work/out"
  reply=$(post_state "$name" drain)
  held_at[$name]=$(field "$reply" held_keys)
  echo "   POST /upstreams/$name/drain: state $(field "$reply" state); sessions in use on it stay"
  key=$(new_key_of "$name")
  lookup=$(curl -fsS -m 5 "$admin/debug/lookup?key=$key")
  chosen=$(field "$lookup" chosen)
  [ "$chosen" != "$name" ] && [ "$chosen" != null ] || fail "a new key of draining $name goes to $chosen"
  grep -q "\"name\": *\"$name\", *\"reason\": *\"draining\"" <<<"$(tr -d '\n' <<<"$lookup")" ||
    fail "/debug/lookup does not say $name was skipped as draining: $lookup"
  echo "   a new key of $name goes to another upstream ($name skipped: draining)"
  wait_until 30 "$name drained" drained "$name"
  took[$name]=$(($(now_ms) - start))
  echo "   drained: no session held on it, nothing in flight"
  kill "${pid[$name]}"
  wait "${pid[$name]}" 2>/dev/null || true
  start_upstream "$name" $((base + i))
  wait_until 20 "ringlb sees $name up" available "$name"
  echo "   restarted, and ringlb sees it up"
  reply=$(post_state "$name" ready)
  rm -f "$work/out"
  echo "   POST /upstreams/$name/ready: state $(field "$reply" state); sessions begun elsewhere meanwhile stay there"
done

say "Every upstream was restarted once"
sleep 1
for u in "${users[@]}"; do
  kill -TERM "${pid[user-$u]}"
done
for u in "${users[@]}"; do
  wait "${pid[user-$u]}" 2>/dev/null || true
  unset "pid[user-$u]"
done
sessions=0 visits=0 failed=0 lost=0 during=0
for u in "${users[@]}"; do
  read -r s v f l d <"$work/user-$u"
  sessions=$((sessions + s)) visits=$((visits + v)) failed=$((failed + f)) lost=$((lost + l)) during=$((during + d))
done
printf '   %-8s %13s %14s\n' upstream "held at drain" "drained after"
for i in 1 2 3 4; do
  printf '   %-8s %13s %14s\n' "app-$i" "${held_at[app-$i]}" "$(secs "${took[app-$i]}")"
done
echo "   background: $sessions sessions ($during begun while an upstream was out), $visits visits, $failed failed requests, $lost sessions whose count started over"
if [ "$failed" -gt 0 ]; then
  head -n 5 "$work/failures" >&2
  fail "$failed requests failed"
fi
if [ "$lost" -gt 0 ]; then
  head -n 5 "$work/lost" >&2
  fail "$lost sessions lost their count"
fi
[ "$sessions" -ge 24 ] || fail "only $sessions sessions ran: the background load did not get going"
[ "$during" -ge 12 ] || fail "only $during sessions began while an upstream was out: the run shows nothing of the return"
echo
echo "OK: rolling restart of 4 upstreams: no request failed, no session lost"
