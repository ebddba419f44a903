#!/usr/bin/env bash
# bench/ab.sh: CPU per request of several builds side by side, interleaved
# in every round, in bench/run.sh's setup (the proxy GOMAXPROCS=1 on
# PROXY_CPU; wrk -t1 -c64 over bench/paths.lua, or h2load -c16 -m4, and
# four bench/upstream on LOAD_CPU). For before/after comparisons of a
# change: build each version, then
#
#   B='go build -trimpath -ldflags=-s\ -w'; export CGO_ENABLED=0   # as the Dockerfile builds
#   $B -o /tmp/ringlb-old ./cmd/ringlb      # on the old commit
#   $B -o /tmp/ringlb-new ./cmd/ringlb
#   $B -o /tmp/floor ./bench/floor
#   TARGETS="floor=floor:/tmp/floor old=ringlb:/tmp/ringlb-old new=ringlb:/tmp/ringlb-new" bash bench/ab.sh
#
# TARGETS is a list of NAME=KIND:BINARY[:YAML]. KIND is ringlb, floor
# (bench/floor), ringlbh2 or floorh2 (TLS with HTTP/2 at the front, driven
# by h2load). For ringlb, the optional YAML file's lines are added to the
# config (bench/run.sh's: hash.key [uri], load_factor 1.25, no upstream
# header, no access log; debug_pprof on), e.g. a file holding
# `request_id_header: ""` measures ringlb without request ids. A file that
# sets access_log, hash or ring replaces the default's, and one with pools:
# carries its own hash, ring and upstreams (the upstreams listen on
# BASE+1..4). A NAME
# starting with "fresh" is restarted before each of its windows, to
# compare a new process with one that has been serving since the start.
#
# Each window prints, per target: CPU us/request (utime+stime of the
# process over the window / requests), the requests, and "busy": CPU of
# everything else on PROXY_CPU during the window, in cores (above ~0.1 the
# window is disturbed). Environment:
#   ROUNDS=4 DUR=6      rounds, and seconds per window (each after 1 s unmeasured)
#   MALLOC=1            also heap allocations, bytes allocated and GC cycles per request (runtime
#                       memstats from /debug/pprof/allocs?debug=1 around the window)
#   SYSCALLS=1          also read and write system calls per request (/proc/PID/io)
#   PROF=DIR            also a CPU profile of each window (DUR-1 s) into DIR/NAME.ROUND.pprof
#   INSTR=DIR           run every target under valgrind's callgrind and count the
#                       instructions it executes per request in each window: the
#                       same for the same binary and load whatever else the machine
#                       does, unlike CPU time (system calls' kernel work is not in
#                       it; SYSCALLS=1 counts those). Each window's count by
#                       function goes to DIR/NAME.ROUND.sum (bench/cgsum; compare
#                       two with `go run ./bench/cgsum -diff A.sum B.sum`). The
#                       binaries need their symbol tables (no -ldflags=-s), the
#                       processes run ~50 times slower (DUR=10 gives ~6000
#                       requests), and run with GODEBUG=asyncpreemptoff=1 and
#                       SIGPIPE blocked, as callgrind does not survive Go's
#                       preemption signals or two threads' SIGPIPEs at once.
#   LUA=paths.lua       the wrk script of the HTTP/1.1 targets (post.lua: 4 KiB
#                       JSON POSTs, for a config keyed on json: user)
#   BASE=29100          upstreams on BASE+1..4, target i on BASE+10+2i (admin +1)
#   PROXY_CPU=1 LOAD_CPU=0
set -uo pipefail
export LC_ALL=C
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-4}
DUR=${DUR:-6}
BASE=${BASE:-29100}
PROXY_CPU=${PROXY_CPU:-1}
LUA=${LUA:-paths.lua}
LOAD_CPU=${LOAD_CPU:-0}
TARGETS=${TARGETS:?set TARGETS, see the comment at the top}
CLK=$(getconf CLK_TCK)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ringlb-ab.XXXXXX")
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT

(cd "$ROOT" && go build -o "$WORK/upstream" ./bench/upstream) || exit 1
VG=()
if [[ -n ${INSTR:-} ]]; then
	command -v valgrind >/dev/null || {
		echo "INSTR needs valgrind (apt-get install -y valgrind)" >&2
		exit 1
	}
	(cd "$ROOT" && go build -o "$WORK/cgsum" ./bench/cgsum) || exit 1
	mkdir -p "$INSTR"
	export GODEBUG=asyncpreemptoff=1
fi
if [[ $TARGETS == *h2:* ]]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/tls.key" \
		-out "$WORK/tls.crt" -days 2 -subj /CN=localhost 2>/dev/null || exit 1
fi
UP=()
for i in 1 2 3 4; do UP+=($((BASE + i))); done
for p in "${UP[@]}"; do
	GOMAXPROCS=1 taskset -c "$LOAD_CPU" "$WORK/upstream" -listen "127.0.0.1:$p" -name "u$p" >/dev/null 2>&1 &
	PIDS+=($!)
done
sleep 0.5

# ticks PID: utime+stime in clock ticks.
ticks() {
	local f
	f=$(cat "/proc/$1/stat")
	f=${f##*) }
	# shellcheck disable=SC2086
	set -- $f
	echo $((${12} + ${13}))
}
core_ticks() { awk -v c="cpu$PROXY_CPU" '$1 == c { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
upstream_args() { for p in "${UP[@]}"; do printf ' http://127.0.0.1:%s' "$p"; done; }
sysio() { awk '$1 == "syscr:" { r = $2 } $1 == "syscw:" { w = $2 } END { print r, w }' "/proc/$1/io"; }
memstats() { curl -s "http://127.0.0.1:$1/debug/pprof/allocs?debug=1" | awk '/^# Mallocs = / { m = $4 } /^# NumGC = / { g = $4 } /^# TotalAlloc = / { t = $4 } END { print m, g, t }'; }

declare -A URL PID SPEC SLOT ADMIN BIN
# start SPEC SLOT: starts the target of SPEC on port BASE+10+2*SLOT.
start() {
	local spec=$1 n=$2 name rest kind bin cfg port admin
	name=${spec%%=*} rest=${spec#*=}
	kind=${rest%%:*} rest=${rest#*:}
	bin=${rest%%:*} cfg=${rest#*:}
	[[ $cfg == "$bin" ]] && cfg=
	port=$((BASE + 10 + n * 2)) admin=$((BASE + 11 + n * 2))
	# SIGPIPE blocked: callgrind fails an assertion when two threads take
	# one at once (writes to connections the load generator closed), and
	# Go leaves a signal blocked at start blocked.
	[[ -z ${INSTR:-} ]] || VG=(perl -MPOSIX -e 'sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGPIPE)); exec @ARGV or die "$ARGV[0]: $!"'
		valgrind -q --tool=callgrind --dump-instr=yes --dump-line=no --compress-pos=no
		--compress-strings=no --callgrind-out-file="$WORK/$name.cg")
	BIN[$name]=$bin
	case $kind in
	ringlb | ringlbh2)
		{
			echo "listen: 127.0.0.1:$port"
			echo "admin_listen: 127.0.0.1:$admin"
			echo 'upstream_header: ""'
			[[ -n $cfg ]] && grep -q '^access_log:' "$cfg" || echo "access_log: false"
			echo "debug_pprof: true"
			if [[ $kind == ringlbh2 ]]; then
				printf 'tls:\n  cert_file: %s\n  key_file: %s\nhttp2: true\n' "$WORK/tls.crt" "$WORK/tls.key"
			fi
			[[ -z $cfg ]] || cat "$cfg"
			# A file with pools carries hash, ring and upstreams in them;
			# one that sets hash or ring replaces the default's.
			if [[ -z $cfg ]] || ! grep -q '^pools:' "$cfg"; then
				[[ -n $cfg ]] && grep -q '^hash:' "$cfg" || printf 'hash:\n  key: [uri]\n'
				[[ -n $cfg ]] && grep -q '^ring:' "$cfg" || printf 'ring:\n  load_factor: 1.25\n'
				echo 'upstreams:'
				for p in "${UP[@]}"; do printf '  - name: u%s\n    url: http://127.0.0.1:%s\n' "$p" "$p"; done
			fi
		} >"$WORK/$name.yaml"
		GOMAXPROCS=1 taskset -c "$PROXY_CPU" "${VG[@]}" "$bin" serve -config "$WORK/$name.yaml" >"$WORK/$name.log" 2>&1 &
		;;
	floor)
		# shellcheck disable=SC2046
		GOMAXPROCS=1 taskset -c "$PROXY_CPU" "${VG[@]}" "$bin" -listen "127.0.0.1:$port" -pprof "127.0.0.1:$admin" $(upstream_args) >"$WORK/$name.log" 2>&1 &
		;;
	floorh2)
		# shellcheck disable=SC2046
		GOMAXPROCS=1 taskset -c "$PROXY_CPU" "${VG[@]}" "$bin" -listen "127.0.0.1:$port" -pprof "127.0.0.1:$admin" \
			-tls-cert "$WORK/tls.crt" -tls-key "$WORK/tls.key" $(upstream_args) >"$WORK/$name.log" 2>&1 &
		;;
	*)
		echo "unknown kind $kind in $spec" >&2
		exit 2
		;;
	esac
	PID[$name]=$!
	PIDS+=($!)
	ADMIN[$name]=$admin
	URL[$name]=http://127.0.0.1:$port
	[[ $kind != *h2 ]] || URL[$name]=https://127.0.0.1:$port
	# Under valgrind a start takes seconds.
	for _ in $(seq 1 120); do
		curl -sk -o /dev/null "${URL[$name]}/" && return
		sleep 0.5
	done
	echo "$name did not come up on ${URL[$name]}: $WORK/$name.log" >&2
}
n=0
for spec in $TARGETS; do
	name=${spec%%=*}
	SPEC[$name]=$spec SLOT[$name]=$n
	start "$spec" $n
	n=$((n + 1))
done
sleep 1

# load NAME SECONDS: drives NAME; prints the requests completed.
load() {
	local u=${URL[$1]}
	if [[ $u == https* ]]; then
		# shellcheck disable=SC2046
		taskset -c "$LOAD_CPU" h2load -c16 -m4 -D "$2" $(awk -v u="$u" 'BEGIN { for (i = 0; i < 400; i++) printf "%s/k/%d ", u, (i * 7919) % 100000 }') 2>&1 |
			awk '/^requests:/ { print $8 }'
	else
		(cd "$ROOT/bench" && taskset -c "$LOAD_CPU" wrk -t1 -c64 -d"${2}s" -s "$LUA" "$u" 2>&1 | awk '/ requests in / { print $1 }')
	fi
}
for t in "${!URL[@]}"; do load "$t" 2 >/dev/null; done
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -z ${PROF:-} ]] || mkdir -p "$PROF"
for r in $(seq 1 "$ROUNDS"); do
	line="round $r:"
	for spec in $TARGETS; do
		t=${spec%%=*}
		if [[ $t == fresh* ]]; then
			kill "${PID[$t]}"
			wait "${PID[$t]}" 2>/dev/null
			start "${SPEC[$t]}" "${SLOT[$t]}"
			sleep 1
			load "$t" 2 >/dev/null
		fi
		load "$t" 1 >/dev/null
		[[ -z ${MALLOC:-} ]] || m0=$(memstats "${ADMIN[$t]}")
		[[ -z ${SYSCALLS:-} ]] || s0=$(sysio "${PID[$t]}")
		[[ -z ${INSTR:-} ]] || callgrind_control -z "${PID[$t]}" >/dev/null 2>&1
		a=$(ticks "${PID[$t]}") c0=$(core_ticks)
		if [[ -n ${PROF:-} ]]; then
			(sleep 0.5 && curl -s -o "$PROF/$t.$r.pprof" "http://127.0.0.1:${ADMIN[$t]}/debug/pprof/profile?seconds=$((DUR - 1))") &
			cp=$!
		fi
		req=$(load "$t" "$DUR")
		[[ -z ${PROF:-} ]] || wait "$cp"
		b=$(ticks "${PID[$t]}") c1=$(core_ticks)
		extra=
		if [[ -n ${INSTR:-} ]]; then
			callgrind_control -d "${PID[$t]}" >/dev/null 2>&1
			# shellcheck disable=SC2012
			out=$(ls -t "$WORK/$t.cg".* | head -1)
			"$WORK/cgsum" -bin "${BIN[$t]}" -n "$req" "$out" >"$INSTR/$t.$r.sum" && rm -f "$out"
			extra+=",$(head -1 "$INSTR/$t.$r.sum" | cut -f1) instr"
		fi
		if [[ -n ${SYSCALLS:-} ]]; then
			s1=$(sysio "${PID[$t]}")
			extra+=$(awk -v a="$s0" -v b="$s1" -v n="$req" 'BEGIN { split(a, x, " "); split(b, y, " "); printf ",%.2f reads,%.2f writes", (y[1] - x[1]) / n, (y[2] - x[2]) / n }')
		fi
		if [[ -n ${MALLOC:-} ]]; then
			m1=$(memstats "${ADMIN[$t]}")
			extra+=$(awk -v a="$m0" -v b="$m1" -v n="$req" 'BEGIN { split(a, x, " "); split(b, y, " "); printf ",%.1f allocs,%.0f B,%.2f GC/1000", (y[1] - x[1]) / n, (y[3] - x[3]) / n, (y[2] - x[2]) * 1000 / n }')
		fi
		line+=$(awk -v t="$t" -v a="$a" -v b="$b" -v c0="$c0" -v c1="$c1" -v n="$req" -v k="$CLK" -v d="$DUR" -v x="$extra" \
			'BEGIN { printf " %s=%.2f(%d req,busy %.2f%s)", t, (b - a) / k * 1e6 / n, n, ((c1 - c0) - (b - a)) / k / d, x }')
	done
	echo "$line"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
