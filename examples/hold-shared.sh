#!/usr/bin/env bash
# hold-shared.sh: watch three ringlb replicas keep users in use on their
# upstream through a scale-out, although each user's requests reach the
# replicas in turn and no cookie carries the hold: the replicas share their
# hold records through Redis (hold.share).
# It needs bash, curl, Go and redis-server, and runs from any directory:
#
#   bash examples/hold-shared.sh
#
# It builds ringlb and the demo upstream (examples/upstream, which answers
# "user U: visit N on NAME" and counts visits in memory), starts a
# redis-server of its own (no persistence), four upstreams and three
# ringlb replicas on loopback with `hold: {idle: 30s, share: {redis: ...}}`,
# keyed on the query parameter user. Requests go to the replicas in turn,
# as behind a round-robin load balancer: each user is first served by one
# replica, and after the change by another, one that never served it.
# While a background loop keeps sending requests, a fifth upstream is added
# on every replica: the new ring gives some users to app-5, yet every user
# in use stays where its visits are counted, served by a replica that only
# knows of it through the shared records.
#
# It exits 1 if a user moved or a background request failed, and cleans up
# every process it started. Ports: SHARE_PORT_BASE (default 19400):
# upstreams on BASE+1..BASE+5, redis-server on BASE+6, the replicas'
# proxies on BASE+7..BASE+9 and their admin listeners on BASE+10..BASE+12.
set -euo pipefail

idle=30 # seconds: hold.idle
users=(alice bob carol dave erin frank grace heidi ivan judy mallory oscar)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=examples/lib.sh
. "$repo/examples/lib.sh"
# The first replica's listeners: proxy and admin (lib.sh's fail reads
# them) are replica 0's; each replica has its own.
proxy_port=$((${SHARE_PORT_BASE:-19400} + 7))
admin_port=$((${SHARE_PORT_BASE:-19400} + 10))
example_init hold-shared SHARE_PORT_BASE 19400
redis_port=$((base + 6))

proxy_of() { echo "http://127.0.0.1:$((base + 7 + $1))"; }
admin_of() { echo "http://127.0.0.1:$((base + 10 + $1))"; }

write_config() { # R N: replica R's config with upstreams app-1..app-N
  {
    config_head hold-shared.sh $((base + 7 + $1)) $((base + 10 + $1))
    printf 'hold:\n  idle: %ss\n  share:\n    redis: redis://127.0.0.1:%s\n' "$idle" "$redis_port"
    upstream_entries "$2"
  } >"$work/ringlb-$1.yaml"
}

start_replica() { # R
  need_port $((base + 7 + $1))
  need_port $((base + 10 + $1))
  "$work/ringlb" serve -config "$work/ringlb-$1.yaml" >"$work/ringlb-$1.log" 2>&1 &
  pid[ringlb-$1]=$!
  wait_until 20 "replica $1 ready" curl -fsS -m 5 "$(admin_of "$1")/readyz"
}

declare -A via=() owner=()
turn=0
# round USERS...: each user's next visit, on the next replica in turn.
round() {
  local u r
  for u in "$@"; do
    r=$((turn % 3))
    turn=$((turn + 1))
    proxy=$(proxy_of "$r")
    visit "$u"
    via[$u]=r$((r + 1))
  done
}

table() {
  local u
  printf '   %-9s %-8s %5s  %-7s %-8s %s\n' user upstream visit replica "ring" ""
  for u in "$@"; do
    printf '   %-9s %-8s %5s  %-7s %-8s %s\n' "$u" "${up[$u]}" "${visit[$u]}" "${via[$u]}" "${owner[$u]:-}" "${note[$u]}"
  done
  if [ ${#bad[@]} -gt 0 ]; then
    fail "the shared hold broke for ${bad[*]} (see the table)"
  fi
}

command -v redis-server >/dev/null || fail "redis-server is not on PATH (Debian: apt-get install redis-server)"
build

say "Starting redis-server, four demo upstreams and three ringlb replicas sharing hold records"
need_port "$redis_port"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
pid[redis]=$!
wait_until 20 "redis-server on port $redis_port" bash -c "exec 3<>/dev/tcp/127.0.0.1/$redis_port"
for i in 1 2 3 4; do
  start_upstream "app-$i" $((base + i))
done
for r in 0 1 2; do
  write_config "$r" 4
  start_replica "$r"
done
echo "   replicas r1, r2, r3 on $(proxy_of 0), $(proxy_of 1), $(proxy_of 2); the key is the query parameter user."

say "Twelve users visit three times, the replicas taking requests in turn: one upstream each"
round "${users[@]}"
round "${users[@]}"
for u in "${users[@]}"; do
  check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1))" stayed "$u"
done
round "${users[@]}"
for u in "${users[@]}"; do
  check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1))" stayed "$u"
done
table "${users[@]}"

say "Background load: 20 other users on every replica in turn, from now to the end"
load_url() { echo "$(proxy_of $(($1 % 3)))/?user=load-$1"; }
start_load

sleep 0.5 # the records of the last visits reach the store (within 100 ms)
say "Scale-out: start app-5 and add it on every replica (POST /reload)"
start_upstream app-5 $((base + 5))
for r in 0 1 2; do
  write_config "$r" 5
  reload "$(admin_of "$r")" "r$((r + 1))"
done
echo "   every replica reloaded: $reply"

turn=$((turn + 1)) # the rotation shifts: each user now reaches a replica that never served it
say "The users visit again, each on a replica that never served it: the ring gives some to app-5, yet nobody moves"
moved=0
for pass in 1 2 3; do
  round "${users[@]}"
  for u in "${users[@]}"; do
    check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1)): a user in use stays" stayed "$u"
  done
done
for u in "${users[@]}"; do
  owner[$u]=$(lookup "$u" owner) # the same on every replica
  if [ "${owner[$u]}" != "${up[$u]}" ]; then
    moved=$((moved + 1))
    note[$u]="held: the ring says ${owner[$u]}"
  fi
done
table "${users[@]}"
[ "$moved" -ge 1 ] || fail "the new ring moved none of the users; the demo needs one"
echo "   without share $moved of ${#users[@]} users would have moved; with it, none did."

stop_load
found=0
for r in 0 1 2; do
  found=$((found + $(metric ringlb_hold_share_lookups_total "$(admin_of "$r")" | cut -d. -f1)))
done
echo
echo "   background load: $load_ok requests answered, $load_failed failed"
echo "   store lookups after the change, all replicas: $found"
[ "$load_failed" -eq 0 ] || fail "$load_failed background requests failed"
echo
echo "OK: users in use stayed on their upstream through the scale-out, on every replica"
