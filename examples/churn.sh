#!/usr/bin/env bash
# churn.sh: watch ringlb keep each user on the same upstream while upstreams
# crash, come back and join. It needs bash, curl and Go, and runs from any
# directory:
#
#   bash examples/churn.sh
#
# It builds ringlb and the demo upstream (examples/upstream, which answers
# "user U: visit N on NAME" and counts visits in memory), starts four
# upstreams and ringlb on loopback, and sends one request per user per
# round. A user whose visit count keeps counting stayed put; a count back at
# 1 means the user landed on another upstream (or on a restarted one). Then:
#
#   1. kill -9 one upstream: only its users move, everyone else counts on;
#   2. restart it: once ringlb's health check readmits it, exactly its users
#      come home (to a fresh process: their count starts again at 1);
#   3. add a fifth upstream (edit the config, POST /reload): about a fifth
#      of the users move, all of them to the newcomer.
#
# It exits 1 if affinity did not hold, and cleans up every process it
# started. Ports: CHURN_PORT_BASE (default 19200); upstreams listen on
# BASE+1..BASE+5, the proxy on BASE+8, the admin listener on BASE+9.
set -euo pipefail

users=(alice bob carol dave erin frank grace heidi ivan judy mallory oscar)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=examples/lib.sh
. "$repo/examples/lib.sh"
example_init churn CHURN_PORT_BASE 19200

# available NAME: prints what /debug/ring says of NAME's availability
# (true or false; nothing if NAME is not on the ring).
available() {
  curl -fsS -m 5 "$admin/debug/ring" | awk -v want="\"$1\"" '
    $1 == "\"name\":" { name = $2; sub(/,$/, "", name) }
    $1 == "\"available\":" && name == want { v = $2; sub(/,$/, "", v); print v; exit }'
}
is_available() { [ "$(available "$1")" = true ]; }
is_ejected() { [ "$(available "$1")" = false ]; }

# share NAME: NAME's share of the ring, in percent, from /debug/ring.
share() {
  curl -fsS -m 5 "$admin/debug/ring" | awk -v want="\"$1\"" '
    $1 == "\"name\":" { name = $2; sub(/,$/, "", name) }
    $1 == "\"share\":" && name == want { v = $2; sub(/,$/, "", v); printf "%.1f%%", v * 100; exit }'
}


write_config() { # N: a config with upstreams app-1..app-N
  {
    config_head churn.sh "$proxy_port" "$admin_port"
    upstream_entries "$1"
    cat <<EOF
health:
  path: /healthz
  interval: 200ms
  timeout: 150ms
  fall: 2
  rise: 2
retries: 1
EOF
  } >"$work/ringlb.yaml"
}


table() {
  local u
  printf '   %-9s %-7s %5s  %s\n' user upstream visit ""
  for u in "${users[@]}"; do
    printf '   %-9s %-7s %5s  %s\n' "$u" "${up[$u]}" "${visit[$u]}" "${note[$u]}"
  done
}

report() {
  table
  if [ ${#bad[@]} -gt 0 ]; then
    fail "affinity broke for ${bad[*]} (see the table)"
  fi
}

build

say "Starting four demo upstreams (app-1..app-4 on 127.0.0.1:$((base + 1))-$((base + 4))) and ringlb"
for i in 1 2 3 4; do
  start_upstream "app-$i" $((base + i))
done
write_config 4
start_ringlb
echo "   proxy $proxy, admin $admin; the key is the query parameter user,"
echo "   health checks every 200ms (2 failures eject, 2 passes readmit)."

say "Twelve users visit twice: each sticks to one upstream, whose count goes 1, 2"
round "${users[@]}"
round "${users[@]}"
for u in "${users[@]}"; do
  check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1)): nothing changed" stayed "$u"
done
report

# The victim: the upstream with the most users (first by name on a tie).
declare -A count=()
for u in "${users[@]}"; do
  count[${up[$u]}]=$((${count[${up[$u]}]:-0} + 1))
done
victim="" most=0
for i in 1 2 3 4; do
  if [ "${count[app-$i]:-0}" -gt "$most" ]; then
    victim=app-$i most=${count[app-$i]}
  fi
done
victim_port=$((base + ${victim#app-}))
declare -A home=()
for u in "${users[@]}"; do
  home[$u]=${up[$u]}
done

say "kill -9 $victim (it serves $most of the twelve users)"
{ kill -9 "${pid[$victim]}" && wait "${pid[$victim]}"; } 2>/dev/null || true # no "Killed" notice
unset "pid[$victim]"
start=$(now_ms)
wait_until 20 "/debug/ring showing $victim ejected" is_ejected "$victim"
echo "   /debug/ring shows $victim ejected by the health check $(since "$start") after the kill"

say "Everyone visits again: only $victim's users move; every other count goes on"
round "${users[@]}"
for u in "${users[@]}"; do
  if [ "${prev_up[$u]}" = "$victim" ]; then
    check "$u" "still reported on the dead $victim" test "${up[$u]}" != "$victim"
    note[$u]="moved: $victim is down"
  else
    check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1)): only $victim went down" stayed "$u"
  fi
done
report

say "Restart $victim on the same port; wait for ringlb to readmit it"
start_upstream "$victim" "$victim_port"
start=$(now_ms)
wait_until 20 "/debug/ring showing $victim available" is_available "$victim"
echo "   /debug/ring shows $victim available again $(since "$start") after it started answering"

say "Everyone visits again: exactly $victim's users come home"
round "${users[@]}"
for u in "${users[@]}"; do
  if [ "${home[$u]}" = "$victim" ]; then
    check "$u" "not home on $victim" test "${up[$u]}" = "$victim"
    note[$u]="home again (a new process: its count restarts at 1)"
  else
    check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1)): only $victim came back" stayed "$u"
  fi
done
report

say "Add app-5: start it, add it to the config, POST /reload"
start_upstream app-5 $((base + 5))
write_config 5
reload "$admin"
echo "   POST /reload: $reply; app-5 owns $(share app-5) of the ring"

say "Everyone visits again: about a fifth of the users move, all of them to app-5"
round "${users[@]}"
moved=0
for u in "${users[@]}"; do
  if [ "${up[$u]}" != "${prev_up[$u]}" ]; then
    moved=$((moved + 1))
    # Served by app-5 (its own answer and ringlb's X-Upstream agree, see
    # round), and app-5's first visit from this user.
    check "$u" "moved from ${prev_up[$u]}, but not to the newcomer" test "${up[$u]}" = app-5
    check "$u" "on app-5, but not its first visit there" test "${visit[$u]}" -eq 1
    note[$u]="moved to the newcomer"
  else
    check "$u" "expected visit $((${prev_visit[$u]} + 1)) on ${prev_up[$u]}" stayed "$u"
  fi
done
report
# app-5 owns about a fifth of the ring: with twelve users, none moving
# means the reload did not reach the ring.
[ "$moved" -gt 0 ] || fail "no user moved to app-5 after the reload (app-5 owns $(share app-5) of the ring)"
echo "   $moved of ${#users[@]} users moved, all to app-5; the others kept counting."

say "OK: affinity held through a crash, a return and a scale-out"
