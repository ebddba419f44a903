#!/usr/bin/env bash
# handoff.sh: watch the new owner of a key learn where the key was. It
# needs bash, curl and Go, and runs from any directory:
#
#   bash examples/handoff.sh
#
# It builds ringlb and the demo upstream (examples/upstream, which answers
# "user U: visit N on NAME" and counts visits in memory), starts four
# upstreams and ringlb without hold, lets forty users visit three times,
# then adds a fifth upstream (edit the config, POST /reload) and lets each
# user visit once more. About a fifth of the users move to the newcomer.
# It does that twice:
#
#   1. without handoff: the newcomer has never seen a mover, whose count
#      starts again at 1;
#   2. with `handoff: {header: Ringlb-Handoff}` and the upstreams started
#      with -handoff Ringlb-Handoff: a mover's request names the upstream
#      it was on (name="app-2", url="http://..."), the newcomer fetches the
#      user's count from there, and the count goes on.
#
# It exits 1 unless some users moved, every mover's count restarted
# without handoff, and none did with it. It cleans up every process it
# started. Ports: HANDOFF_PORT_BASE (default 19600); upstreams listen on
# BASE+1..BASE+5, the proxy on BASE+8, the admin listener on BASE+9.
set -euo pipefail

users=()
for i in $(seq -w 1 40); do
  users+=("user$i")
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=examples/lib.sh
. "$repo/examples/lib.sh"
example_init handoff HANDOFF_PORT_BASE 19600

write_config() { # N [HEADER]: upstreams app-1..app-N, handoff through HEADER ("" off)
  {
    config_head handoff.sh "$proxy_port" "$admin_port"
    upstream_entries "$1"
    if [ -n "${2:-}" ]; then
      printf 'handoff:\n  header: %s\n  window: 5m\n' "$2"
    fi
  } >"$work/ringlb.yaml"
}

stop_all() {
  local p
  for p in "${!pid[@]}"; do
    kill "${pid[$p]}" 2>/dev/null || true
    wait "${pid[$p]}" 2>/dev/null || true
    unset "pid[$p]"
  done
}

# scale_out [HEADER]: the run; sets moved and restarted, and prints one
# mover's handoff from /debug/lookup.
scale_out() {
  local header=${1:-} flags=() i u
  [ -n "$header" ] && flags=(-handoff "$header")
  for i in 1 2 3 4 5; do
    start_upstream "app-$i" $((base + i)) "${flags[@]}"
  done
  write_config 4 "$header"
  start_ringlb
  for i in 1 2 3; do
    round "${users[@]}"
  done
  write_config 5 "$header"
  reload "$admin"
  echo "   added app-5 (POST /reload: version $(field "$reply" version))"
  if [ -n "$header" ]; then
    for u in "${users[@]}"; do
      if [ "$(lookup "$u" owner)" = app-5 ]; then
        echo "   /debug/lookup?key=$u: to $(lookup "$u" chosen), handoff from $(lookup "$u" from) ($(lookup "$u" url))"
        break
      fi
    done
  fi
  round "${users[@]}"
  moved=0 restarted=0
  for u in "${users[@]}"; do
    if [ "${up[$u]}" != "${prev_up[$u]}" ]; then
      moved=$((moved + 1))
      [ "${up[$u]}" = app-5 ] || fail "$u moved from ${prev_up[$u]} to ${up[$u]}, not to the newcomer"
      if [ "${visit[$u]}" -eq 1 ]; then
        restarted=$((restarted + 1))
      elif [ "${visit[$u]}" -ne 4 ]; then
        fail "$u moved to app-5 at visit ${visit[$u]}, want 4 (or 1 without its count)"
      fi
    fi
  done
  stop_all
}

build

say "Without handoff: four upstreams, forty users visit three times, then app-5 joins"
scale_out
without_moved=$moved without=$restarted
echo "   $moved of ${#users[@]} users moved to app-5; the counts of $restarted of them restarted at 1"

say "With handoff (header Ringlb-Handoff; the upstreams fetch a mover's count from the upstream it names)"
scale_out Ringlb-Handoff
with_moved=$moved with=$restarted
echo "   $moved of ${#users[@]} users moved to app-5; the counts of $restarted of them restarted at 1"

say "Users whose count restarted at the scale-out"
printf '   %-16s %5s %9s\n' "" moved restarted
printf '   %-16s %5s %9s\n' "without handoff" "$without_moved" "$without"
printf '   %-16s %5s %9s\n' "with handoff" "$with_moved" "$with"
[ "$without_moved" -gt 0 ] && [ "$with_moved" -gt 0 ] || fail "nobody moved: the run shows nothing"
[ "$without" -eq "$without_moved" ] || fail "without handoff only $without of $without_moved movers restarted: the newcomer knew counts it could not know"
[ "$with" -eq 0 ] || fail "with handoff $with movers' counts restarted"
echo
echo "OK: handoff: 0 of $with_moved movers lost their count ($without of $without_moved without it)"
