#!/usr/bin/env bash
# hold.sh: watch ringlb's hold keep users in use on their upstream while an
# upstream is added under load, and new users reach the newcomer at once.
# It needs bash, curl and Go, and runs from any directory:
#
#   bash examples/hold.sh
#
# It builds ringlb and the demo upstream (examples/upstream, which answers
# "user U: visit N on NAME" and counts visits in memory), starts four
# upstreams and ringlb on loopback with `hold: {idle: 6s}`, and sends one
# request per user per round. A user whose visit count keeps counting
# stayed put; a count back at 1 means the user landed on another upstream.
# While a background loop keeps sending requests:
#
#   1. add a fifth upstream (edit the config, POST /reload): the ring now
#      gives about a fifth of the users to app-5, but every user in use
#      stays where its visits are counted (0 moved);
#   2. twelve new users arrive: each goes where the new ring says, app-5
#      included;
#   3. half of the held users keep visiting, the others go idle for longer
#      than idle: the busy ones still stay, the idle ones now follow the
#      ring (to app-5 where it owns them, starting again at visit 1).
#
# It exits 1 if something went otherwise, and cleans up every process it
# started. Ports: HOLD_PORT_BASE (default 19300); upstreams listen on
# BASE+1..BASE+5, the proxy on BASE+8, the admin listener on BASE+9.
set -euo pipefail

idle=6 # seconds: hold.idle
users=(alice bob carol dave erin frank grace heidi ivan judy mallory oscar)
newcomers=(peggy rupert sybil trent victor walter xavier yvonne zoe quentin nadia otto)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=examples/lib.sh
. "$repo/examples/lib.sh"
example_init hold HOLD_PORT_BASE 19300

write_config() { # N: a config with upstreams app-1..app-N
  {
    config_head hold.sh "$proxy_port" "$admin_port"
    printf 'hold:\n  idle: %ss\n' "$idle"
    upstream_entries "$1"
    cat <<EOF
health:
  path: /healthz
  interval: 200ms
  timeout: 150ms
retries: 1
EOF
  } >"$work/ringlb.yaml"
}


table() {
  local u
  printf '   %-9s %-8s %5s  %-8s %s\n' user upstream visit "ring" ""
  for u in "$@"; do
    printf '   %-9s %-8s %5s  %-8s %s\n' "$u" "${up[$u]}" "${visit[$u]}" "${owner[$u]:-}" "${note[$u]}"
  done
}

report() {
  table "$@"
  if [ ${#bad[@]} -gt 0 ]; then
    fail "hold broke for ${bad[*]} (see the table)"
  fi
}

build

say "Starting four demo upstreams (app-1..app-4) and ringlb with hold idle ${idle}s"
for i in 1 2 3 4; do
  start_upstream "app-$i" $((base + i))
done
write_config 4
start_ringlb
echo "   proxy $proxy, admin $admin; the key is the query parameter user."

declare -A owner=()
say "Twelve users visit twice: each sticks to one upstream, whose count goes 1, 2"
round "${users[@]}"
round "${users[@]}"
for u in "${users[@]}"; do
  check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1))" stayed "$u"
done
report "${users[@]}"

say "Background load: a loop of requests for 20 other users, from now to the end"
start_load

say "Add app-5 under load: start it, add it to the config, POST /reload"
start_upstream app-5 $((base + 5))
write_config 5
reload "$admin"
echo "   POST /reload: $reply"

say "The users in use visit again: the ring gives some of them to app-5, yet nobody moves"
round "${users[@]}"
moved=()
for u in "${users[@]}"; do
  owner[$u]=$(lookup "$u" owner)
  check "$u" "expected ${prev_up[$u]}, visit $((${prev_visit[$u]} + 1)): a user in use stays" stayed "$u"
  if [ "${owner[$u]}" != "${up[$u]}" ]; then
    moved+=("$u")
    held=$(lookup "$u" held)
    check "$u" "/debug/lookup says held $held" test "$held" = "${up[$u]}"
    note[$u]="held: the ring says ${owner[$u]}"
  fi
done
report "${users[@]}"
[ ${#moved[@]} -ge 2 ] || fail "the new ring moved ${#moved[@]} of the users; the demo needs two"
echo "   without hold ${#moved[@]} of ${#users[@]} users would have moved at once; with it, none did."

# The held users take turns: the first, third, ... keep visiting, the
# others go idle.
busy=() sleepers=()
for i in "${!moved[@]}"; do
  if ((i % 2 == 0)); then busy+=("${moved[$i]}"); else sleepers+=("${moved[$i]}"); fi
done
declare -A was=()
for u in "${sleepers[@]}"; do
  was[$u]=${up[$u]}
done

say "Twelve new users arrive: each goes where the new ring says"
for u in "${newcomers[@]}"; do
  visit "$u"
  round "${busy[@]}" # the busy users keep visiting meanwhile
  for b in "${busy[@]}"; do
    check "$b" "a busy user stays" stayed "$b"
  done
done
on5=0
for u in "${newcomers[@]}"; do
  owner[$u]=$(lookup "$u" owner)
  check "$u" "a new user must follow the ring" test "${up[$u]}" = "${owner[$u]}"
  check "$u" "a new user's first visit" test "${visit[$u]}" -eq 1
  if [ "${up[$u]}" = app-5 ]; then
    on5=$((on5 + 1))
    note[$u]="on the newcomer"
  fi
done
report "${newcomers[@]}"
[ "$on5" -gt 0 ] || fail "no new user reached app-5"
echo "   $on5 of ${#newcomers[@]} new users reached app-5."

say "Busy: ${busy[*]} (visiting on); idle: ${sleepers[*]} (away for longer than ${idle}s)"
# expired: every sleeper's hold is gone (lookup's held is null).
expired() {
  local u
  for u in "${sleepers[@]}"; do
    [ "$(lookup "$u" held)" = null ] || return 1
  done
}
rounds=0
for ((i = 0; ; i++)); do
  round "${busy[@]}"
  rounds=$((rounds + 1))
  for u in "${busy[@]}"; do
    check "$u" "a busy user stays" stayed "$u"
  done
  [ ${#bad[@]} -eq 0 ] || report "${busy[@]}"
  if expired; then
    break
  fi
  ((i < 100)) || fail "the idle users' holds did not expire after 100 rounds"
  sleep 0.3
done
echo "   the busy users visited $rounds more times each; the idle ones' holds expired."

say "Everyone visits again: the busy ones are still held, the idle ones follow the ring"
round "${moved[@]}"
for u in "${busy[@]}"; do
  check "$u" "a busy user stays" stayed "$u"
  note[$u]="still held: the ring says ${owner[$u]}"
done
for u in "${sleepers[@]}"; do
  check "$u" "an idle user follows the ring" test "${up[$u]}" = "${owner[$u]}"
  check "$u" "a first visit on ${owner[$u]}" test "${visit[$u]}" -eq 1
  note[$u]="idle: moved from ${was[$u]}"
done
report "${moved[@]}"

stop_load
echo
echo "   background load: $load_ok requests answered, $load_failed failed"
[ "$load_failed" -eq 0 ] || fail "$load_failed background requests failed"
echo "   ringlb_hold_keys $(metric ringlb_hold_keys), ringlb_held_total $(metric ringlb_held_total)"

say "OK: users in use stayed through the scale-out, new and idle users followed the ring"
