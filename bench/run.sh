#!/usr/bin/env bash
# bench/run.sh: side-by-side benchmark of ringlb, nginx, HAProxy, Caddy and
# Traefik doing the same job (consistent hashing of the request URI over four
# upstreams, bounded loads where the proxy has them; Traefik, which cannot
# hash, keeps each path on its upstream with its sticky cookie), plus wrk
# straight at one upstream as the ceiling. See bench/README.md for what it
# measures and how to read it.
#
#   bash bench/run.sh                        # defaults: DURATION=10s ROUNDS=3
#   DURATION=5s ROUNDS=2 bash bench/run.sh   # quicker, noisier
#
# Environment (all optional):
#   DURATION=10s      measured wrk window per run (wrk syntax: 10s, 1m)
#   ROUNDS=3          rounds; each round runs every target once, interleaved
#   WARMUP=2s         unmeasured wrk run per target before round 1 (0 to skip)
#   PREWARM=1s        unmeasured wrk run right before every measured run, so
#                     that each window starts with warm upstream pools (nginx
#                     closes idle upstream connections after 60 s) (0 to skip)
#   CONNS=64          wrk connections
#   BENCH_PATHS=100000 distinct request paths (/k/<n>), read by bench/paths.lua
#   TARGETS="direct floor ringlb nginx haproxy caddy traefik"  subset / order of targets;
#                     floor is bench/floor: net/http's server, ReverseProxy and
#                     ringlb's HTTP/1.1 transport with nothing else (what
#                     ringlb's parts cost before ringlb's own work); lean (not
#                     by default) is floor with a bare server loop in place of
#                     net/http's server, a measurement of what that server costs;
#                     caddy and traefik are built from their Go modules (below)
#   SPREAD_N=200      distinct paths sent twice each in the stickiness check
#   BASE_PORT=19100   upstreams on BASE+1..4, caddy BASE+76, traefik BASE+77, lean BASE+78,
#                     floor BASE+79, ringlb BASE+80 (admin +81), nginx BASE+82, haproxy BASE+83
#   BENCH_CACHE=~/.cache/ringlb-bench  caddy and traefik are built once into
#                     BENCH_CACHE/bin (caddy with go install, traefik with go
#                     build in a copy of its module's source; static, no
#                     symbols) and reused while there; a build that failed is
#                     not tried again until its BENCH_CACHE/NAME-VERSION.failed
#                     is deleted
#   CADDY_VERSION=v2.11.9 TRAEFIK_VERSION=v3.6.12
#   CADDY_BIN= TRAEFIK_BIN=  a binary to use instead of building one
#   PROXY_CPU=1 LOAD_CPU=0   cores for the proxy, and for wrk + upstreams
#   PIN=1             0 turns pinning off (it is off anyway on one core)
#   RESULTS=bench/RESULTS.md  where the Markdown report goes ("" for none;
#                     bench/RESULTS-h2.md by default with H2=only)
#   KEEP_WORK=0       1 keeps the temp dir (configs, logs, raw wrk output)
#   INSTALL=1         0: never apt-get; targets whose binary is missing are skipped
#   H2=0              1: after the HTTP/1.1 runs, an HTTP/2-over-TLS row: h2load
#                     (nghttp2-client) against ringlb, nginx and HAProxy with TLS
#                     and HTTP/2 at the front, HTTP/1.1 to the same upstreams, same
#                     hashing; only: that row alone. The HTTP/1.1 runs are the same
#                     with or without it (the HTTP/2 proxies are other processes,
#                     started after them)
#   H2_CLIENTS=16 H2_STREAMS=4  h2load connections, and concurrent streams on each
#                     (16 x 4 = wrk's 64 requests in flight)
#   H2_BASE_PORT=BASE_PORT+84   ringlb (admin +1), nginx +2, haproxy +3, floor +4, with TLS
#   RATE=0            1: after the HTTP/1.1 runs, latency at a constant rate:
#                     bench/rate (wrk2-style, no coordinated omission) against
#                     the same targets at RATE_LEVELS percent of RATE_PEAK
#   RATE_LEVELS="25 50 75"  RATE_PEAK=  (default: nginx's median req/s of this run)
#   RATE_DURATION=10s RATE_ROUNDS=1 RATE_CONNS=CONNS
#   FEATURES=0        1: after the HTTP/1.1 runs, one ringlb process per feature
#                     in FEATURE_LIST, interleaved with plain ringlb: each
#                     feature's CPU/request and p99 against plain ringlb
#   FEATURE_LIST="plain hold holdhome share pools alog nohot nolimits handoff handoffmoved
#                 post json sse ssedirect chat4k prefix4k chat64k prefix64k"
#                     plain: a fresh ringlb process with ringlb's config, started
#                     with the others and the base of their ratios (without it
#                     the base is the ringlb process of the main rounds, which
#                     has been running longer)
#   FEATURE_ROUNDS=ROUNDS FEATURE_WARMUP=15s (hold, holdhome and share: long enough to see every path)
#   POST_BODY=4096 POST_KEYS=1000  the post and json rows' bodies (bench/post.lua)
#   SSE_EVENTS=1000 SSE_CONNS=1    the sse rows: a text/event-stream of SSE_EVENTS
#                     events per request (bench/sse.lua), over SSE_CONNS connections
#   CHAT_KEYS=100     the chat and prefix rows' conversations (bench/chat.lua)
#   PREFIX_KEY="[{prefix: {bytes: 256}}]"  the prefix rows' hash.key (skipped, with
#                     ringlb validate's reason, when this build refuses it)
#   REDIS_PORT=BASE_PORT+89        the share row's redis-server; features on BASE+90.., admin BASE+110..
#   RAW_UPSTREAM=0    1: the four upstreams answer from bench/upstream's own
#                     HTTP/1.1 loop (-raw) instead of net/http's server: the
#                     same responses at about a third of the CPU, which leaves
#                     the load core room at a constant rate
set -euo pipefail

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2s}
PREWARM=${PREWARM:-1s}
CONNS=${CONNS:-64}
BENCH_PATHS=${BENCH_PATHS:-100000}
TARGETS=${TARGETS:-direct floor ringlb nginx haproxy caddy traefik}
SPREAD_N=${SPREAD_N:-200}
BASE_PORT=${BASE_PORT:-19100}
PROXY_CPU=${PROXY_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
PIN=${PIN:-1}
RESULTS_GIVEN=${RESULTS+set}
RESULTS=${RESULTS-$ROOT/bench/RESULTS.md}
KEEP_WORK=${KEEP_WORK:-0}
INSTALL=${INSTALL:-1}
H2=${H2:-0}
# H2=only writes its own report, so that bench/RESULTS.md keeps the HTTP/1.1 figures.
[[ $H2 != only || -n $RESULTS_GIVEN ]] || RESULTS=$ROOT/bench/RESULTS-h2.md
H2_CLIENTS=${H2_CLIENTS:-16}
H2_STREAMS=${H2_STREAMS:-4}
H2_BASE_PORT=${H2_BASE_PORT:-$((BASE_PORT + 84))}
RATE=${RATE:-0}
RATE_LEVELS=${RATE_LEVELS:-25 50 75}
RATE_PEAK=${RATE_PEAK:-}
RATE_DURATION=${RATE_DURATION:-10s}
RATE_ROUNDS=${RATE_ROUNDS:-1}
RATE_CONNS=${RATE_CONNS:-$CONNS}
FEATURES=${FEATURES:-0}
FEATURE_LIST=${FEATURE_LIST:-plain hold holdhome share pools alog nohot nolimits handoff handoffmoved post json sse ssedirect chat4k prefix4k chat64k prefix64k}
FEATURE_ROUNDS=${FEATURE_ROUNDS:-$ROUNDS}
FEATURE_WARMUP=${FEATURE_WARMUP:-15s}
POST_BODY=${POST_BODY:-4096}
POST_KEYS=${POST_KEYS:-1000}
SSE_EVENTS=${SSE_EVENTS:-1000}
SSE_CONNS=${SSE_CONNS:-1}
CHAT_KEYS=${CHAT_KEYS:-100}
[[ -n ${PREFIX_KEY:-} ]] || PREFIX_KEY='[{prefix: {bytes: 256}}]'
REDIS_PORT=${REDIS_PORT:-$((BASE_PORT + 89))}
RAW_UPSTREAM=${RAW_UPSTREAM:-0}
BENCH_CACHE=${BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringlb-bench}
CADDY_VERSION=${CADDY_VERSION:-v2.11.9}
TRAEFIK_VERSION=${TRAEFIK_VERSION:-v3.6.12}
CADDY_BIN=${CADDY_BIN:-}
TRAEFIK_BIN=${TRAEFIK_BIN:-}
export BENCH_PATHS POST_BODY POST_KEYS SSE_EVENTS CHAT_KEYS

INVOCATION="DURATION=$DURATION ROUNDS=$ROUNDS WARMUP=$WARMUP PREWARM=$PREWARM CONNS=$CONNS BENCH_PATHS=$BENCH_PATHS TARGETS=\"$TARGETS\" bash bench/run.sh"
[[ $H2 == 0 ]] || INVOCATION="H2=$H2 H2_CLIENTS=$H2_CLIENTS H2_STREAMS=$H2_STREAMS $INVOCATION"
[[ $RATE == 0 ]] || INVOCATION="RATE=$RATE RATE_LEVELS=\"$RATE_LEVELS\" RATE_DURATION=$RATE_DURATION RATE_ROUNDS=$RATE_ROUNDS RATE_CONNS=$RATE_CONNS${RATE_PEAK:+ RATE_PEAK=$RATE_PEAK} $INVOCATION"
[[ $FEATURES == 0 ]] || INVOCATION="FEATURES=$FEATURES FEATURE_LIST=\"$FEATURE_LIST\" FEATURE_ROUNDS=$FEATURE_ROUNDS FEATURE_WARMUP=$FEATURE_WARMUP POST_BODY=$POST_BODY POST_KEYS=$POST_KEYS SSE_EVENTS=$SSE_EVENTS SSE_CONNS=$SSE_CONNS CHAT_KEYS=$CHAT_KEYS PREFIX_KEY=\"$PREFIX_KEY\" $INVOCATION"
[[ $RAW_UPSTREAM == 0 ]] || INVOCATION="RAW_UPSTREAM=$RAW_UPSTREAM $INVOCATION"
[[ $RAW_UPSTREAM == 0 || $RAW_UPSTREAM == 1 ]] || { echo "bad RAW_UPSTREAM=$RAW_UPSTREAM (0 or 1)" >&2; exit 1; }
[[ $RATE == 0 || $RATE == 1 ]] || { echo "bad RATE=$RATE (0 or 1)" >&2; exit 1; }
[[ $FEATURES == 0 || $FEATURES == 1 ]] || { echo "bad FEATURES=$FEATURES (0 or 1)" >&2; exit 1; }
case $H2 in 0 | 1 | only) ;; *) echo "bad H2=$H2 (0, 1 or only)" >&2; exit 1 ;; esac
H1=1
[[ $H2 != only ]] || H1=0

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# to_seconds 10s|1m|90 -> whole seconds
to_seconds() {
	local v=$1
	case $v in
	*ms) die "durations under a second are not supported: $v" ;;
	*s) echo "${v%s}" ;;
	*m) echo $((${v%m} * 60)) ;;
	*h) echo $((${v%h} * 3600)) ;;
	*) echo "$v" ;;
	esac
}
DUR_S=$(to_seconds "$DURATION")
WARM_S=$(to_seconds "$WARMUP")
PREWARM_S=$(to_seconds "$PREWARM")
[[ $DUR_S =~ ^[0-9]+$ && $DUR_S -ge 1 ]] || die "bad DURATION=$DURATION"
[[ $WARM_S =~ ^[0-9]+$ ]] || die "bad WARMUP=$WARMUP"
[[ $PREWARM_S =~ ^[0-9]+$ ]] || die "bad PREWARM=$PREWARM"
RATE_DUR_S=$(to_seconds "$RATE_DURATION")
FEAT_WARM_S=$(to_seconds "$FEATURE_WARMUP")
[[ $RATE_DUR_S =~ ^[0-9]+$ && $RATE_DUR_S -ge 1 ]] || die "bad RATE_DURATION=$RATE_DURATION"
[[ $FEAT_WARM_S =~ ^[0-9]+$ ]] || die "bad FEATURE_WARMUP=$FEATURE_WARMUP"
[[ $RATE_ROUNDS =~ ^[0-9]+$ && $RATE_ROUNDS -ge 1 ]] || die "bad RATE_ROUNDS=$RATE_ROUNDS"
[[ $FEATURE_ROUNDS =~ ^[0-9]+$ && $FEATURE_ROUNDS -ge 1 ]] || die "bad FEATURE_ROUNDS=$FEATURE_ROUNDS"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "bad ROUNDS=$ROUNDS"

CLK_TCK=$(getconf CLK_TCK)
LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)
NCPU=$(nproc)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ringlb-bench.XXXXXX")
chmod 755 "$WORK" # nginx workers run as nobody when started as root
PIDS=()           # everything we started, killed on exit
WRK_PID=          # the wrk running now, if any

cleanup() {
	local rc=$? pid i
	trap - EXIT INT TERM
	[[ -n $WRK_PID ]] && PIDS+=("$WRK_PID")
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for i in $(seq 1 30); do
		local alive=0
		for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.1
	done
	for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ $KEEP_WORK == 1 ]]; then
		log "kept $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- tools

ensure_tools() {
	local need=() b
	for b in nginx haproxy wrk; do command -v "$b" >/dev/null || need+=("$b"); done
	((${#need[@]})) || return 0
	if [[ $INSTALL != 1 ]]; then
		log "missing ${need[*]}; INSTALL=0, so those targets are skipped"
		return 0
	fi
	log "installing ${need[*]} with apt-get"
	local sudo=()
	((EUID == 0)) || sudo=(sudo)
	if ! { "${sudo[@]}" apt-get update && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y nginx haproxy wrk; } >"$WORK/apt.log" 2>&1; then
		log "apt-get failed; targets missing a binary are skipped. Last lines:"
		tail -5 "$WORK/apt.log" >&2
	fi
}
ensure_tools
((!H1)) || command -v wrk >/dev/null || die "wrk is required (apt-get install -y wrk)"
if [[ $H2 != 0 ]] && ! command -v h2load >/dev/null && [[ $INSTALL == 1 ]]; then
	log "installing nghttp2-client (h2load) with apt-get"
	sudo=()
	((EUID == 0)) || sudo=(sudo)
	{ "${sudo[@]}" apt-get update && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y nghttp2-client; } >"$WORK/apt-h2.log" 2>&1 ||
		log "apt-get install nghttp2-client failed: $(tail -2 "$WORK/apt-h2.log" | tr '\n' ' ')"
fi
if [[ $H2 != 0 ]]; then
	command -v h2load >/dev/null || die "H2=$H2 needs h2load (apt-get install -y nghttp2-client)"
	command -v openssl >/dev/null || die "H2=$H2 needs openssl (for a self-signed certificate)"
fi
command -v go >/dev/null || die "go is required"
command -v curl >/dev/null || die "curl is required"

if [[ $PIN == 1 ]] && ((NCPU >= 2)) && command -v taskset >/dev/null; then
	PINNED=1
	LOAD=(taskset -c "$LOAD_CPU")
	PROXY=(taskset -c "$PROXY_CPU")
else
	PINNED=0
	LOAD=()
	PROXY=()
	log "warning: not pinning (PIN=$PIN, $NCPU cpus): proxy, wrk and upstreams share every core; figures are not comparable to pinned runs"
fi

# ---------------------------------------------------------------- helpers

port_free() { [[ -z $(ss -Htln "sport = :$1" 2>/dev/null) ]]; }

# wait_http URL PID NAME: until URL answers (any status), or PID dies, or 10 s.
wait_http() {
	local url=$1 pid=$2 name=$3 i
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		curl -s -o /dev/null --max-time 1 "$url" && return 0
		sleep 0.1
	done
	log "$name did not answer at $url within 10 s"
	return 1
}

# ticks PID...: utime+stime (fields 14, 15 of /proc/PID/stat) summed, in clock ticks.
ticks() {
	local p f t=0
	for p in "$@"; do
		f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		f=${f##*) } # drop "pid (comm) ", comm may hold spaces and parentheses
		# shellcheck disable=SC2086
		set -- $f
		# now $1 is field 3 (state): field n is ${n-2}
		t=$((t + ${12} + ${13}))
	done
	echo "$t"
}

# snapshot_all: "pid ticks" for every process on the machine.
snapshot_all() {
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } |
		awk '{ p = $1; s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print p, f[12] + f[13] }'
}

# foreign_ticks BEFORE AFTER EXCLUDED_PID...: CPU ticks of every other process
# during the window: the growth of those alive at both ends, plus all of those
# started in between (processes that started and ended inside the window are
# invisible to this; the per-core busy figures in the run log catch them).
foreign_ticks() {
	local before=$1 after=$2
	shift 2
	awk -v ex="$*" '
		BEGIN { n = split(ex, e, " "); for (i = 1; i <= n; i++) skip[e[i]] = 1 }
		FNR == NR { b[$1] = $2; next }
		($1 in skip) { next }
		{ d = ($1 in b) ? $2 - b[$1] : $2; if (d < 0) d = $2; t += d }
		END { print t + 0 }' "$before" "$after"
}

# cpu_busy: "busy total" jiffies for each of LOAD_CPU and PROXY_CPU, from /proc/stat.
cpu_busy() {
	awk -v a="cpu$LOAD_CPU" -v b="cpu$PROXY_CPU" '
		{ busy[$1] = $2 + $3 + $4 + $7 + $8 + $9; tot[$1] = busy[$1] + $5 + $6 }
		END { print busy[a] + 0, tot[a] + 0, busy[b] + 0, tot[b] + 0 }' /proc/stat
}

# upstream_conns: connections the four upstreams have accepted so far (each
# call opens one per upstream itself).
upstream_conns() {
	local p n t=0
	for p in "${UPORTS[@]}"; do
		n=$(curl -s --max-time 2 "http://127.0.0.1:$p/_stats" | awk '$1 == "conns" { print $2 }')
		t=$((t + ${n:-0}))
	done
	echo "$t"
}

vmhwm_kib() {
	local p t=0 v
	for p in "$@"; do
		v=$(awk '/^VmHWM:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
		t=$((t + ${v:-0}))
	done
	echo "$t"
}

# parse_wrk FILE -> "rps requests p50_ms p99_ms non2xx socket_errors"
parse_wrk() {
	awk '
		function ms(v,   n, u) {
			n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
			if (u == "us") return n / 1000
			if (u == "ms") return n
			if (u == "s") return n * 1000
			if (u == "m") return n * 60000
			return n
		}
		$1 == "50%" { p50 = ms($2) }
		$1 == "99%" { p99 = ms($2) }
		/ requests in / { reqs = $1 }
		/^Requests\/sec:/ { rps = $2 }
		/Non-2xx or 3xx responses:/ { bad = $NF }
		/Socket errors:/ { gsub(/,/, ""); serr = $4 + $6 + $8 + $10 }
		END { printf "%.0f %d %.3f %.3f %d %d\n", rps, reqs, p50, p99, bad, serr }' "$1"
}

# stats: reads numbers, prints "median min max" (or "- - -" for none).
stats() {
	sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "- - -"; exit }
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		print m, v[1], v[NR] }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }

# ---------------------------------------------------------------- build

log "work dir $WORK; $NCPU cpus; pinning=$PINNED (proxy cpu $PROXY_CPU, wrk+upstreams cpu $LOAD_CPU)"
(cd "$ROOT" && go build -o "$WORK/upstream" ./bench/upstream) || die "cannot build bench/upstream"

# build NAME PKG: go build PKG into $WORK/NAME, or print why it failed.
# Built as the Dockerfile builds ringlb: static (no cgo, so no libc mapped:
# 2.5 MiB less resident than a default build), no symbols.
build() {
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$WORK/$1" "$2") >"$WORK/$1-build.log" 2>&1 && return 0
	echo "go build $2 failed: $(head -3 "$WORK/$1-build.log" | tr '\n' ' ')"
	return 1
}
HAVE_RINGLB=0 HAVE_FLOOR=0
RINGLB_SKIP=$(build ringlb ./cmd/ringlb) && HAVE_RINGLB=1
FLOOR_SKIP=$(build floor ./bench/floor) && HAVE_FLOOR=1

# mod_build MODULE@VERSION DIR PKG LDFLAGS OUT: builds PKG (a path from the
# module's root) into OUT, static, in DIR/src, a copy of the module's
# source, as the main module, so that its go.mod's replace directives
# apply. go mod download -json says where the module cache holds that
# source, or why it cannot. The cache's files are read-only: the copy is
# made writable, for go build and for rm. It is no checkout:
# -buildvcs=false keeps a repository that DIR may sit in out of the binary.
mod_build() {
	local modver=$1 dir=$2 pkg=$3 ld=$4 out=$5 src
	(cd "$dir" && GOFLAGS= go mod download -json "$modver") >"$dir/mod.json" || {
		grep '"Error"' "$dir/mod.json"
		return 1
	}
	src=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' "$dir/mod.json")
	[[ -n $src ]] && cp -r "$src" "$dir/src" && chmod -R u+w "$dir/src" &&
		(cd "$dir/src" && GOFLAGS= CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "$ld" -o "$out" "$pkg")
}

# go_tool NAME VERSION PKG [VERSION_VAR [MODULE]]: prints the path of NAME
# at VERSION in BENCH_CACHE/bin, built the first time static and without
# symbols as ringlb is built (VERSION_VAR, a package variable, is set to
# VERSION with -X). Without MODULE it is go install PKG@VERSION. go install
# refuses a module whose go.mod has replace directives (Traefik's has): for
# such a one MODULE names the module that holds PKG, and mod_build builds
# PKG in a copy of MODULE@VERSION's source, where those directives apply.
# Either way only modules are fetched, from GOPROXY. On failure prints
# nothing, returns 1 and leaves the reason in BENCH_CACHE/NAME-VERSION.failed,
# which stops later runs from building it again until it is deleted.
go_tool() {
	local name=$1 ver=$2 pkg=$3 xvar=${4:-} mod=${5:-}
	local bin="$BENCH_CACHE/bin/$name-$ver" failed="$BENCH_CACHE/$name-$ver.failed" logf="$BENCH_CACHE/$name-$ver-build.log" tmp ld="-s -w" how
	if [[ -x $bin ]]; then
		echo "$bin"
		return 0
	fi
	[[ ! -f $failed ]] || return 1
	mkdir -p "$BENCH_CACHE/bin" && tmp=$(mktemp -d "$BENCH_CACHE/build.XXXXXX") || return 1
	[[ -z $xvar ]] || ld="$ld -X $xvar=$ver"
	if [[ -z $mod ]]; then
		how="go install $pkg@$ver"
		log "building $name $ver: $how, once (kept in $BENCH_CACHE/bin; log $logf)"
		if (cd "$tmp" && GOBIN=$tmp GOFLAGS= CGO_ENABLED=0 go install -trimpath -ldflags "$ld" "$pkg@$ver") >"$logf" 2>&1; then
			mv "$tmp/$(basename "$pkg")" "$bin" && rm -rf "$tmp" && echo "$bin"
			return
		fi
	else
		how="go build ./${pkg#"$mod"/} in a copy of $mod@$ver"
		log "building $name $ver: $how, once, many minutes on a small machine (kept in $BENCH_CACHE/bin; log $logf)"
		if mod_build "$mod@$ver" "$tmp" "./${pkg#"$mod"/}" "$ld" "$bin" >"$logf" 2>&1; then
			rm -rf "$tmp"
			echo "$bin"
			return
		fi
	fi
	rm -rf "$tmp"
	echo "$how: $(grep -v '^go: downloading' "$logf" | head -4 | tr '\n\t' '  ') (full log: $logf; delete $failed to try again)" >"$failed"
	return 1
}

# tool_bin NAME GIVEN VERSION PKG [VERSION_VAR [MODULE]]: sets TOOL to the
# binary for target NAME (GIVEN if set, else go_tool's), or TOOL_WHY.
tool_bin() {
	local name=$1 given=$2
	shift 2
	TOOL= TOOL_WHY=
	if [[ -n $given ]]; then
		[[ -x $given ]] && TOOL=$given || TOOL_WHY="$given is not an executable"
		return
	fi
	TOOL=$(go_tool "$name" "$@") || TOOL_WHY="could not build $name $1: $(cat "$BENCH_CACHE/$name-$1.failed" 2>/dev/null)"
}
CADDY= CADDY_WHY= TRAEFIK= TRAEFIK_WHY=
if [[ " $TARGETS " == *" caddy "* ]] && ((H1)); then
	tool_bin caddy "$CADDY_BIN" "$CADDY_VERSION" github.com/caddyserver/caddy/v2/cmd/caddy
	CADDY=$TOOL CADDY_WHY=$TOOL_WHY
fi
if [[ " $TARGETS " == *" traefik "* ]] && ((H1)); then
	tool_bin traefik "$TRAEFIK_BIN" "$TRAEFIK_VERSION" github.com/traefik/traefik/v3/cmd/traefik \
		github.com/traefik/traefik/v3/pkg/version.Version github.com/traefik/traefik/v3
	TRAEFIK=$TOOL TRAEFIK_WHY=$TOOL_WHY
fi

UPORTS=()
for i in 1 2 3 4; do UPORTS+=($((BASE_PORT + i))); done
CADDY_PORT=$((BASE_PORT + 76))
TRAEFIK_PORT=$((BASE_PORT + 77))
LEAN_PORT=$((BASE_PORT + 78))
FLOOR_PORT=$((BASE_PORT + 79))
RINGLB_PORT=$((BASE_PORT + 80))
ADMIN_PORT=$((BASE_PORT + 81))
NGINX_PORT=$((BASE_PORT + 82))
HAPROXY_PORT=$((BASE_PORT + 83))
for p in "${UPORTS[@]}" "$CADDY_PORT" "$TRAEFIK_PORT" "$LEAN_PORT" "$FLOOR_PORT" "$RINGLB_PORT" "$ADMIN_PORT" "$NGINX_PORT" "$HAPROXY_PORT"; do
	port_free "$p" || die "port $p is in use (set BASE_PORT)"
done
H2_RINGLB_PORT=$H2_BASE_PORT
H2_ADMIN_PORT=$((H2_BASE_PORT + 1))
H2_NGINX_PORT=$((H2_BASE_PORT + 2))
H2_HAPROXY_PORT=$((H2_BASE_PORT + 3))
H2_FLOOR_PORT=$((H2_BASE_PORT + 4))
if [[ $H2 != 0 ]]; then
	for p in "$H2_RINGLB_PORT" "$H2_ADMIN_PORT" "$H2_NGINX_PORT" "$H2_HAPROXY_PORT" "$H2_FLOOR_PORT"; do
		port_free "$p" || die "port $p is in use (set H2_BASE_PORT)"
	done
fi

# ---------------------------------------------------------------- configs

mkdir -p "$WORK/nginx/tmp" "$WORK/haproxy" "$WORK/caddy" "$WORK/traefik"

{
	echo "listen: 127.0.0.1:$RINGLB_PORT"
	echo "admin_listen: 127.0.0.1:$ADMIN_PORT"
	echo 'upstream_header: ""'
	echo "access_log: false"
	echo "hash:"
	echo "  key: [uri]"
	echo "ring:"
	echo "  load_factor: 1.25"
	echo "upstreams:"
	for i in 1 2 3 4; do
		echo "  - name: u$i"
		echo "    url: http://127.0.0.1:${UPORTS[i - 1]}"
	done
} >"$WORK/ringlb.yaml"

{
	cat <<EOF
worker_processes 1;
daemon off;
master_process on;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
worker_rlimit_nofile 16384;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/tmp/client_body;
    proxy_temp_path $WORK/nginx/tmp/proxy;
    fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
    scgi_temp_path $WORK/nginx/tmp/scgi;
    # nginx closes a keep-alive connection after 1000 requests by default
    # (client and upstream side); ringlb and HAProxy do not: lift it.
    keepalive_requests 1000000;
    upstream u {
        hash \$request_uri consistent;
EOF
	for p in "${UPORTS[@]}"; do echo "        server 127.0.0.1:$p;"; done
	cat <<EOF
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://u;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
} >"$WORK/nginx/nginx.conf"

{
	cat <<EOF
global
    nbthread 1
    maxconn 4096
    # no log lines: nothing is logged

defaults
    mode http
    option http-keep-alive
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 30s
    timeout http-request 10s

frontend fe
    bind 127.0.0.1:$HAPROXY_PORT
    default_backend be

backend be
    balance uri
    hash-type consistent
    hash-balance-factor 125
    http-reuse always
EOF
	for i in 1 2 3 4; do echo "    server u$i 127.0.0.1:${UPORTS[i - 1]}"; done
} >"$WORK/haproxy/haproxy.cfg"

# Caddy: reverse_proxy with lb_policy uri_hash, which hashes the request
# URI as received (nginx's $request_uri, HAProxy's balance uri), by
# rendezvous hashing, without bounded loads. No admin endpoint (it would
# take localhost:2019), nothing saved or logged, no automatic HTTPS.
cat >"$WORK/caddy/Caddyfile" <<EOF
{
	admin off
	persist_config off
	auto_https off
	log {
		output discard
	}
}

:$CADDY_PORT {
	bind 127.0.0.1
	reverse_proxy ${UPORTS[*]/#/127.0.0.1:} {
		lb_policy uri_hash
	}
}
EOF

# Traefik cannot hash a request onto its servers (its hrw strategy hashes
# the client's address): weighted round robin with its sticky cookie, the
# closest it has. The load then carries, for each path, the cookie naming
# that path's upstream (bench/sticky.lua), so that every request is routed
# by its key as the others route theirs.
TRAEFIK_COOKIE=ringlb_bench
cat >"$WORK/traefik/traefik.yml" <<EOF
global:
  checkNewVersion: false
  sendAnonymousUsage: false
log:
  level: ERROR
entryPoints:
  web:
    address: "127.0.0.1:$TRAEFIK_PORT"
providers:
  file:
    filename: "$WORK/traefik/dynamic.yml"
    watch: false
EOF
{
	cat <<EOF
http:
  routers:
    all:
      entryPoints: [web]
      rule: "PathPrefix(\`/\`)"
      service: upstreams
  services:
    upstreams:
      loadBalancer:
        sticky:
          cookie:
            name: $TRAEFIK_COOKIE
        servers:
EOF
	for p in "${UPORTS[@]}"; do echo "          - url: \"http://127.0.0.1:$p\""; done
} >"$WORK/traefik/dynamic.yml"

# ---------------------------------------------------------------- start

UPIDS=()
for i in 1 2 3 4; do
	GOMAXPROCS=1 "${LOAD[@]}" "$WORK/upstream" $([[ $RAW_UPSTREAM == 1 ]] && echo -raw) -listen "127.0.0.1:${UPORTS[i - 1]}" -name "u$i" >"$WORK/u$i.log" 2>&1 &
	UPIDS+=($!)
	PIDS+=($!)
done
for i in 1 2 3 4; do
	wait_http "http://127.0.0.1:${UPORTS[i - 1]}/" "${UPIDS[i - 1]}" "upstream u$i" || die "upstream u$i did not start: $(cat "$WORK/u$i.log")"
done

declare -A URL=() PIDS_OF=() SKIP=() RSS=() SPREAD=() MED=() SCRIPT=() WRK_ENV=() RATE_ARGS=() STICKY=() WRK_CONNS=()
EXTRA_PIDS=() # processes of ours besides upstreams and proxies (redis-server): not foreign
REDIS_PID=
URL[direct]="http://127.0.0.1:${UPORTS[0]}"
PIDS_OF[direct]=${UPIDS[0]}

start_ringlb() {
	if ((!HAVE_RINGLB)); then
		SKIP[ringlb]=$RINGLB_SKIP
		return
	fi
	GOMAXPROCS=1 "${PROXY[@]}" "$WORK/ringlb" serve -config "$WORK/ringlb.yaml" >"$WORK/ringlb.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	if wait_http "http://127.0.0.1:$RINGLB_PORT/k/0" "$pid" ringlb &&
		[[ $(curl -s --max-time 2 "http://127.0.0.1:$RINGLB_PORT/k/0") == "ok from u"* ]]; then
		URL[ringlb]="http://127.0.0.1:$RINGLB_PORT"
		PIDS_OF[ringlb]=$pid
	else
		SKIP[ringlb]="ringlb serve did not come up: $(tail -3 "$WORK/ringlb.log" | tr '\n' ' ')"
	fi
}

# start_floor TARGET PORT SERVER: bench/floor with -server SERVER.
start_floor() {
	local t=$1 port=$2 server=$3
	if ((!HAVE_FLOOR)); then
		SKIP[$t]=$FLOOR_SKIP
		return
	fi
	GOMAXPROCS=1 "${PROXY[@]}" "$WORK/floor" -server "$server" -listen "127.0.0.1:$port" $(floor_upstreams) >"$WORK/$t.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	if wait_http "http://127.0.0.1:$port/k/0" "$pid" "$t"; then
		URL[$t]="http://127.0.0.1:$port"
		PIDS_OF[$t]=$pid
	else
		SKIP[$t]="bench/floor -server $server did not come up: $(tail -3 "$WORK/$t.log" | tr '\n' ' ')"
	fi
}
floor_upstreams() { for i in 1 2 3 4; do printf ' http://127.0.0.1:%s' "${UPORTS[i - 1]}"; done; }

start_nginx() {
	command -v nginx >/dev/null || {
		SKIP[nginx]="nginx not installed"
		return
	}
	"${PROXY[@]}" nginx -p "$WORK/nginx/" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" >"$WORK/nginx/stdout.log" 2>&1 &
	local pid=$! workers
	PIDS+=("$pid")
	if ! wait_http "http://127.0.0.1:$NGINX_PORT/k/0" "$pid" nginx; then
		SKIP[nginx]="nginx did not come up: $(tail -3 "$WORK/nginx/error.log" "$WORK/nginx/stdout.log" 2>/dev/null | tr '\n' ' ')"
		return
	fi
	workers=$(pgrep -P "$pid" | tr '\n' ' ')
	[[ -n $workers ]] || {
		SKIP[nginx]="nginx has no worker process"
		return
	}
	# shellcheck disable=SC2206
	PIDS+=($workers) # a worker outlives a SIGKILLed master: kill it by pid too
	URL[nginx]="http://127.0.0.1:$NGINX_PORT"
	PIDS_OF[nginx]="$pid $workers"
}

start_haproxy() {
	command -v haproxy >/dev/null || {
		SKIP[haproxy]="haproxy not installed"
		return
	}
	"${PROXY[@]}" haproxy -db -f "$WORK/haproxy/haproxy.cfg" >"$WORK/haproxy/haproxy.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	if wait_http "http://127.0.0.1:$HAPROXY_PORT/k/0" "$pid" haproxy; then
		URL[haproxy]="http://127.0.0.1:$HAPROXY_PORT"
		PIDS_OF[haproxy]=$pid
	else
		SKIP[haproxy]="haproxy did not come up: $(tail -3 "$WORK/haproxy/haproxy.log" | tr '\n' ' ')"
	fi
}

# wait_proxied URL PID NAME: until URL answers with an upstream's body (a
# proxy whose routes load after its listener opens answers 404 first), or
# PID dies, or 10 s.
wait_proxied() {
	local url=$1 pid=$2 name=$3 i
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		[[ $(curl -s --max-time 1 "$url" 2>/dev/null) == "ok from u"* ]] && return 0
		sleep 0.1
	done
	log "$name did not answer from an upstream at $url within 10 s"
	return 1
}

start_caddy() {
	[[ -n $CADDY ]] || {
		SKIP[caddy]=$CADDY_WHY
		return
	}
	# Its home for anything it would write is the work dir, not ~/.config.
	XDG_CONFIG_HOME=$WORK/caddy XDG_DATA_HOME=$WORK/caddy GOMAXPROCS=1 "${PROXY[@]}" "$CADDY" run --config "$WORK/caddy/Caddyfile" --adapter caddyfile >"$WORK/caddy/caddy.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	if wait_proxied "http://127.0.0.1:$CADDY_PORT/k/0" "$pid" caddy; then
		URL[caddy]="http://127.0.0.1:$CADDY_PORT"
		PIDS_OF[caddy]=$pid
	else
		SKIP[caddy]="caddy did not come up: $(tail -3 "$WORK/caddy/caddy.log" | tr '\n' ' ')"
	fi
}

# traefik_cookies URL: NAME=V1,V2,V3,V4, the sticky cookie's value for
# u1..u4, learnt from the Set-Cookie of requests without one (the round
# robin visits every upstream); "" if some upstream never answered.
traefik_cookies() {
	local url=$1 i out u v
	local -A val=()
	for i in $(seq 1 40); do
		out=$(curl -s --max-time 2 -D - "$url/k/$i" | tr -d '\r')
		u=$(awk '/^ok from / { print $3 }' <<<"$out")
		v=$(sed -n "s/^[Ss]et-[Cc]ookie: $TRAEFIK_COOKIE=\([^;]*\).*/\1/p" <<<"$out")
		[[ -z $u || -z $v ]] || val[$u]=$v
		((${#val[@]} < 4)) || break
	done
	((${#val[@]} == 4)) || return 0
	echo "$TRAEFIK_COOKIE=${val[u1]},${val[u2]},${val[u3]},${val[u4]}"
}

start_traefik() {
	[[ -n $TRAEFIK ]] || {
		SKIP[traefik]=$TRAEFIK_WHY
		return
	}
	GOMAXPROCS=1 "${PROXY[@]}" "$TRAEFIK" --configFile="$WORK/traefik/traefik.yml" >"$WORK/traefik/traefik.log" 2>&1 &
	local pid=$! c
	PIDS+=("$pid")
	if ! wait_proxied "http://127.0.0.1:$TRAEFIK_PORT/k/0" "$pid" traefik; then
		SKIP[traefik]="traefik did not come up: $(tail -3 "$WORK/traefik/traefik.log" | tr '\n' ' ')"
		return
	fi
	c=$(traefik_cookies "http://127.0.0.1:$TRAEFIK_PORT")
	if [[ -z $c ]]; then
		SKIP[traefik]="traefik: no sticky cookie ($TRAEFIK_COOKIE) for each of the four upstreams in 40 requests"
		return
	fi
	URL[traefik]="http://127.0.0.1:$TRAEFIK_PORT"
	PIDS_OF[traefik]=$pid
	SCRIPT[traefik]=sticky.lua
	WRK_ENV[traefik]="STICKY_COOKIE=$c"
	RATE_ARGS[traefik]="-cookie $c"
	STICKY[traefik]=$c
}

ACTIVE=()
for t in $TARGETS; do
	((H1)) || break
	case $t in
	direct) ;;
	floor) start_floor floor "$FLOOR_PORT" std ;;
	lean) start_floor lean "$LEAN_PORT" lean ;;
	ringlb) start_ringlb ;;
	nginx) start_nginx ;;
	haproxy) start_haproxy ;;
	caddy) start_caddy ;;
	traefik) start_traefik ;;
	*) die "unknown target $t (direct floor lean ringlb nginx haproxy caddy traefik)" ;;
	esac
	if [[ -n ${SKIP[$t]:-} ]]; then
		log "SKIP $t: ${SKIP[$t]}"
	else
		ACTIVE+=("$t")
	fi
done
((${#ACTIVE[@]} || !H1)) || die "no target to run"

est=$((${#ACTIVE[@]} * (WARM_S + ROUNDS * (DUR_S + PREWARM_S + 1) * 2) + 10 * ${#ACTIVE[@]}))
((!H1)) || log "targets: ${ACTIVE[*]}; ${ROUNDS} rounds x ${DUR_S}s; at most ~$((est / 60))m$((est % 60))s even if every run is repeated"

# ---------------------------------------------------------------- runs

# runs.tsv: target round attempt rps reqs p50 p99 non2xx sockerr cpu_us foreign_cores cpuLoad% cpuProxy% used note upstream_conns core_us
RUNS=$WORK/runs.tsv
: >"$RUNS"

wrk_cmd() { # target seconds -> the wrk command line
	local env="BENCH_PATHS=$BENCH_PATHS"
	case ${SCRIPT[$1]:-} in
	post.lua) env="$env POST_BODY=$POST_BODY POST_KEYS=$POST_KEYS" ;;
	chat.lua) env="$env CHAT_KEYS=$CHAT_KEYS" ;;
	sse.lua) env="$env SSE_EVENTS=$SSE_EVENTS" ;;
	esac
	echo "(cd bench && $env${WRK_ENV[$1]:+ ${WRK_ENV[$1]}} ${LOAD[*]} wrk -t1 -c${WRK_CONNS[$1]:-$CONNS} -d${2}s --latency -s ${SCRIPT[$1]:-paths.lua} ${URL[$1]}/)"
}

# run_wrk SECONDS TARGET [wrk flags]: wrk in the background and `wait` for it,
# so that INT/TERM reach our trap at once rather than after the run.
run_wrk() {
	local secs=$1 t=$2
	shift 2
	local -a env=()
	read -r -a env <<<"${WRK_ENV[$t]:-}"
	(cd "$ROOT/bench" && exec env "${env[@]}" "${LOAD[@]}" wrk -t1 -c"${WRK_CONNS[$t]:-$CONNS}" -d"${secs}s" "$@" -s "${SCRIPT[$t]:-paths.lua}" "${URL[$t]}/") &
	WRK_PID=$!
	wait "$WRK_PID" || true
	WRK_PID=
}

# measure TARGET ROUND ATTEMPT: appends a line to RUNS; sets NOISY=1 when the
# foreign load was above a quarter of a core.
NOISY=0
measure() {
	local t=$1 r=$2 a=$3 out="$WORK/wrk-$1-$2-$3.txt"
	local -a tp
	read -r -a tp <<<"${PIDS_OF[$t]}"
	local before="$WORK/snap.before" after="$WORK/snap.after"
	local c0 c1 t0 t1 s0 s1 o0 o1 w opens core_us
	((PREWARM_S == 0)) || run_wrk "$PREWARM_S" "$t" >"$WORK/wrk-$t-$r-$a-prewarm.txt" 2>&1
	snapshot_all >"$before"
	read -r -a c0 <<<"$(cpu_busy)"
	s0=$(ticks "${tp[@]}")
	o0=$(upstream_conns)
	t0=$(date +%s.%N)
	run_wrk "$DUR_S" "$t" --latency >"$out" 2>&1
	t1=$(date +%s.%N)
	o1=$(upstream_conns)
	s1=$(ticks "${tp[@]}")
	read -r -a c1 <<<"$(cpu_busy)"
	snapshot_all >"$after"
	local fticks
	fticks=$(foreign_ticks "$before" "$after" $$ "${UPIDS[@]}" "${tp[@]}" "${EXTRA_PIDS[@]}")
	local rps reqs p50 p99 bad serr
	read -r rps reqs p50 p99 bad serr <<<"$(parse_wrk "$out")"
	w=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	local cpu_us fcores lpct ppct
	cpu_us=$(awk -v d=$((s1 - s0)) -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { if (n > 0) printf "%.2f", d / hz * 1e6 / n; else print "-" }')
	fcores=$(awk -v f="$fticks" -v hz="$CLK_TCK" -v w="$w" 'BEGIN { printf "%.2f", f / hz / w }')
	lpct=$(awk -v b0="${c0[0]:-0}" -v t0="${c0[1]:-0}" -v b1="${c1[0]:-0}" -v t1="${c1[1]:-0}" 'BEGIN { if (t1 > t0) printf "%.0f", 100 * (b1 - b0) / (t1 - t0); else print "-" }')
	ppct=$(awk -v b0="${c0[2]:-0}" -v t0="${c0[3]:-0}" -v b1="${c1[2]:-0}" -v t1="${c1[3]:-0}" 'BEGIN { if (t1 > t0) printf "%.0f", 100 * (b1 - b0) / (t1 - t0); else print "-" }')
	# minus the 4 connections of the second sample itself; for direct also wrk's
	# own (its CONNS plus the one it opens first to check the address)
	opens=$((o1 - o0 - ${#UPORTS[@]}))
	[[ $t != direct && $t != ssedirect ]] || opens=$((opens - ${WRK_CONNS[$t]:-$CONNS} - 1))
	core_us=$(awk -v b0="${c0[2]:-0}" -v b1="${c1[2]:-0}" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { if (n > 0) printf "%.2f", (b1 - b0) / hz * 1e6 / n; else print "-" }')
	NOISY=$(awk -v f="$fcores" 'BEGIN { print (f > 0.25) ? 1 : 0 }')
	local note=""
	((reqs > 0)) || note="wrk failed: $(tail -2 "$out" | tr '\n' ' ')"
	((bad == 0 && serr == 0)) || note="${note:+$note; }non2xx=$bad sockerr=$serr"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
		"$t" "$r" "$a" "$rps" "$reqs" "$p50" "$p99" "$bad" "$serr" "$cpu_us" "$fcores" "$lpct" "$ppct" 1 "$note" "$opens" "$core_us" >>"$RUNS"
	log "$(printf '%-8s r%s%s %7s req/s  p50 %7.3fms  p99 %8.3fms  cpu %6s us/req (core %6s)  foreign %5s cores  cpu%s/cpu%s %3s%%/%3s%%  upstream conns %s%s' \
		"$t" "$r" "$([[ $a -gt 1 ]] && echo "(repeat)" || echo "        ")" "$rps" "$p50" "$p99" "$cpu_us" "$core_us" "$fcores" "$LOAD_CPU" "$PROXY_CPU" "$lpct" "$ppct" "$opens" "${note:+  [$note]}")"
}

if ((WARM_S > 0)); then
	for t in "${ACTIVE[@]}"; do
		log "warm-up $t ${WARM_S}s"
		run_wrk "$WARM_S" "$t" >"$WORK/wrk-$t-warmup.txt" 2>&1
	done
fi

# measure_kept TARGET ROUND: measure, and if the foreign load was too high,
# drop that run and repeat it once, keeping the repeat either way.
measure_kept() {
	local t=$1 r=$2
	measure "$t" "$r" 1
	((NOISY)) || return 0
	awk -F'\t' -v OFS='\t' -v t="$t" -v r="$r" '$1 == t && $2 == r && $3 == 1 { $14 = 0; $15 = ($15 == "" ? "" : $15 "; ") "dropped: foreign load" } { print }' "$RUNS" >"$RUNS.tmp" && mv "$RUNS.tmp" "$RUNS"
	sleep 1
	measure "$t" "$r" 2
	((NOISY)) || return 0
	awk -F'\t' -v OFS='\t' -v t="$t" -v r="$r" '$1 == t && $2 == r && $3 == 2 { $15 = ($15 == "" ? "" : $15 "; ") "noisy: foreign load again, kept" } { print }' "$RUNS" >"$RUNS.tmp" && mv "$RUNS.tmp" "$RUNS"
}

for r in $(seq 1 "$ROUNDS"); do
	for t in "${ACTIVE[@]}"; do
		sleep 1
		measure_kept "$t" "$r"
	done
done

# ---------------------------------------------------------------- peak RSS

col() { # target column -> "median min max" over used runs
	awk -F'\t' -v t="$1" -v c="$2" '$1 == t && $14 == 1 && $c != "-" && $5 > 0 { print $c }' "$RUNS" | stats
}

for t in "${ACTIVE[@]}"; do
	read -r -a tp <<<"${PIDS_OF[$t]}"
	RSS[$t]=$(awk -v k="$(vmhwm_kib "${tp[@]}")" 'BEGIN { printf "%.1f", k / 1024 }')
done

# ---------------------------------------------------------------- spread / stickiness

# spread TARGET [BASE_URL CURL_FLAG...] -> one line: per-upstream counts,
# stickiness, errors, verdict. The base URL defaults to the target's. A
# target kept on its upstreams by a sticky cookie gets, for path i, the
# cookie the load sends with /k/i (bench/sticky.lua): one curl, a transfer
# per path (--next), as the others get one curl with every path.
spread() {
	local t=$1 base=${2:-${URL[$1]:-}} i pass
	shift $(($# < 2 ? $# : 2))
	local -a urls=() vals=()
	for i in $(seq 1 "$SPREAD_N"); do urls+=("$base/spread/$i"); done
	if [[ -n ${STICKY[$t]:-} ]]; then
		IFS=, read -r -a vals <<<"${STICKY[$t]#*=}"
		for i in $(seq 1 "$SPREAD_N"); do
			((i == 1)) || echo next
			printf 'url = "%s"\nheader = "Cookie: %s=%s"\nsilent\nmax-time = 2\nwrite-out = " %%{http_code}\\n"\n' \
				"$base/spread/$i" "${STICKY[$t]%%=*}" "${vals[i % ${#vals[@]}]}"
		done >"$WORK/spread-$t.curl"
		urls=(-K "$WORK/spread-$t.curl")
	fi
	for pass in 1 2; do
		timeout 60 curl -s --max-time 2 "$@" -w ' %{http_code}\n' "${urls[@]}" 2>/dev/null |
			awk '/^ok from / { name = $3; next } /^ [0-9]+$/ { print (name == "" ? "-" : name), $1; name = "" }' >"$WORK/spread-$t-$pass.txt" || true
	done
	paste -d' ' "$WORK/spread-$t-1.txt" "$WORK/spread-$t-2.txt" | awk -v n="$SPREAD_N" '
		{ seen++; c[$1]++; c[$3]++; if ($2 != 200 || $4 != 200 || $1 == "-" || $3 == "-") err++; else if ($1 == $3) same++ }
		END {
			got = 0; line = ""
			for (i = 1; i <= 4; i++) { k = "u" i; line = line sprintf("%s=%d ", k, c[k]); if (c[k] > 0) got++ }
			ok = (seen == n && err == 0 && same == n && got == 4)
			printf "%s| same upstream both times: %d/%d | errors: %d | %s\n", line, same, n, err + (n - seen), ok ? "OK" : "FAIL"
		}'
}

for t in "${ACTIVE[@]}"; do
	[[ $t == direct ]] && continue
	SPREAD[$t]=$(spread "$t")
	log "spread $t (${SPREAD_N} paths x 2): ${SPREAD[$t]}"
done

# ---------------------------------------------------------------- constant rate (RATE=1)

# The same processes as the HTTP/1.1 runs, now driven at a fixed rate by
# bench/rate (wrk2-style: latency counted from when each request was due, so
# a stall is charged for every request it held back) at RATE_LEVELS percent
# of RATE_PEAK (default: nginx's median req/s above, its measured peak).
# Interleaved: at each level, every target once per round. p50/p99/p99.9
# are then compared with direct's at the same rate: what the proxy adds.

declare -A RMED=()
RRUNS=$WORK/rateruns.tsv
: >"$RRUNS"
# rateruns.tsv: target level rate round achieved p50 p90 p99 p999 max lag_p99 errors cpu_us fcores lpct ppct sent

rate_cmd() { # target rate seconds -> the bench/rate command line
	echo "GOMAXPROCS=1 ${LOAD[*]}${LOAD[*]:+ }rate -url ${URL[$1]} -rate $2 -duration ${3}s -conns $RATE_CONNS -paths $BENCH_PATHS${RATE_ARGS[$1]:+ ${RATE_ARGS[$1]}}"
}

run_rate() { # rate seconds target
	local -a extra=()
	read -r -a extra <<<"${RATE_ARGS[$3]:-}"
	GOMAXPROCS=1 "${LOAD[@]}" "$WORK/rate" -url "${URL[$3]}" -rate "$1" -duration "${2}s" -conns "$RATE_CONNS" -paths "$BENCH_PATHS" "${extra[@]}" &
	WRK_PID=$!
	wait "$WRK_PID" || true
	WRK_PID=
}

# rate_measure TARGET LEVEL RATE ROUND: one window at RATE; appends to RRUNS.
rate_measure() {
	local t=$1 lv=$2 rt=$3 r=$4 out="$WORK/rate-$1-$2-$4.txt"
	local -a tp c0 c1
	read -r -a tp <<<"${PIDS_OF[$t]}"
	local before="$WORK/snap.before" after="$WORK/snap.after" s0 s1 t0 t1 w fticks
	((PREWARM_S == 0)) || run_rate "$rt" "$PREWARM_S" "$t" >"$WORK/rate-$t-$lv-$r-prewarm.txt" 2>&1
	snapshot_all >"$before"
	read -r -a c0 <<<"$(cpu_busy)"
	s0=$(ticks "${tp[@]}")
	t0=$(date +%s.%N)
	run_rate "$rt" "$RATE_DUR_S" "$t" >"$out" 2>&1
	t1=$(date +%s.%N)
	s1=$(ticks "${tp[@]}")
	read -r -a c1 <<<"$(cpu_busy)"
	snapshot_all >"$after"
	fticks=$(foreign_ticks "$before" "$after" $$ "${UPIDS[@]}" "${tp[@]}" "${EXTRA_PIDS[@]}")
	local -A v=()
	local kv
	for kv in $(grep '^rate=' "$out" | tail -1); do v[${kv%%=*}]=${kv#*=}; done
	w=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	local done=${v[done]:-0} cpu_us fcores lpct ppct ms
	cpu_us=$(awk -v d=$((s1 - s0)) -v hz="$CLK_TCK" -v n="$done" 'BEGIN { if (n > 0) printf "%.2f", d / hz * 1e6 / n; else print "-" }')
	fcores=$(awk -v f="$fticks" -v hz="$CLK_TCK" -v w="$w" 'BEGIN { printf "%.2f", f / hz / w }')
	lpct=$(awk -v b0="${c0[0]:-0}" -v t0="${c0[1]:-0}" -v b1="${c1[0]:-0}" -v t1="${c1[1]:-0}" 'BEGIN { if (t1 > t0) printf "%.0f", 100 * (b1 - b0) / (t1 - t0); else print "-" }')
	ppct=$(awk -v b0="${c0[2]:-0}" -v t0="${c0[3]:-0}" -v b1="${c1[2]:-0}" -v t1="${c1[3]:-0}" 'BEGIN { if (t1 > t0) printf "%.0f", 100 * (b1 - b0) / (t1 - t0); else print "-" }')
	ms() { awk -v u="${1:--1}" 'BEGIN { if (u < 0) print "-"; else printf "%.3f", u / 1000 }'; }
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$lv" "$rt" "$r" "${v[achieved]:-0}" \
		"$(ms "${v[p50_us]:-}")" "$(ms "${v[p90_us]:-}")" "$(ms "${v[p99_us]:-}")" "$(ms "${v[p999_us]:-}")" "$(ms "${v[max_us]:-}")" "$(ms "${v[lag_p99_us]:-}")" \
		"${v[errors]:-1}" "$cpu_us" "$fcores" "$lpct" "$ppct" "${v[sent]:-0}" >>"$RRUNS"
	log "$(printf '%-8s %s%% %6s/s r%s  p50 %7sms  p99 %7sms  p99.9 %8sms  max %8sms  gen lag p99 %6sms  cpu %6s us/req  foreign %5s cores  cpu%s/cpu%s %3s%%/%3s%%  errors %s' \
		"$t" "$lv" "$rt" "$r" "$(ms "${v[p50_us]:-}")" "$(ms "${v[p99_us]:-}")" "$(ms "${v[p999_us]:-}")" "$(ms "${v[max_us]:-}")" "$(ms "${v[lag_p99_us]:-}")" \
		"$cpu_us" "$fcores" "$LOAD_CPU" "$PROXY_CPU" "$lpct" "$ppct" "${v[errors]:-?}")"
}

rcol() { # target level column -> "median min max"
	awk -F'\t' -v t="$1" -v l="$2" -v c="$3" '$1 == t && $2 == l && $c != "-" && $5 > 0 { print $c }' "$RRUNS" | stats
}

rate_table() {
	printf '%-6s %-9s %7s %8s %8s %9s %9s %8s %8s %9s %8s %8s %6s %s\n' load target "req/s" "p50 ms" "p99 ms" "p99.9 ms" "max ms" "+p50" "+p99" "+p99.9" "CPU/req" "gen lag" foreign errors
	local lv t a p50 p99 p999 mx lag cpu fc errs d50 d99 d999
	for lv in $RATE_LEVELS; do
		for t in "${ACTIVE[@]}"; do
			read -r a _ _ <<<"$(rcol "$t" "$lv" 5)"
			read -r p50 _ _ <<<"$(rcol "$t" "$lv" 6)"
			read -r p99 _ _ <<<"$(rcol "$t" "$lv" 8)"
			read -r p999 _ _ <<<"$(rcol "$t" "$lv" 9)"
			read -r mx _ _ <<<"$(rcol "$t" "$lv" 10)"
			read -r lag _ _ <<<"$(rcol "$t" "$lv" 11)"
			read -r cpu _ _ <<<"$(rcol "$t" "$lv" 13)"
			read -r fc _ _ <<<"$(rcol "$t" "$lv" 14)"
			errs=$(awk -F'\t' -v t="$t" -v l="$lv" '$1 == t && $2 == l { e += $12 } END { print e + 0 }' "$RRUNS")
			RMED[$t.$lv.p50]=$p50 RMED[$t.$lv.p99]=$p99 RMED[$t.$lv.p999]=$p999
			d50=- d99=- d999=-
			if [[ $t != direct && -n ${RMED[direct.$lv.p50]:-} ]]; then
				d50=$(awk -v a="$p50" -v b="${RMED[direct.$lv.p50]}" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%+.3f", a - b }')
				d99=$(awk -v a="$p99" -v b="${RMED[direct.$lv.p99]}" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%+.3f", a - b }')
				d999=$(awk -v a="$p999" -v b="${RMED[direct.$lv.p999]}" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%+.3f", a - b }')
				RMED[$t.$lv.d99]=$d99 RMED[$t.$lv.d999]=$d999
			fi
			printf '%-6s %-9s %7s %8s %8s %9s %9s %8s %8s %9s %8s %8s %6s %s\n' "$lv%" "$t" "$a" "$p50" "$p99" "$p999" "$mx" "$d50" "$d99" "$d999" "$cpu" "$lag" "$fc" "$errs"
		done
	done
	echo "100% = $RATE_PEAK req/s ($RATE_PEAK_FROM); bench/rate -conns $RATE_CONNS, ${RATE_ROUNDS} round(s) x ${RATE_DUR_S}s per target and level; medians over rounds."
	echo "+p50/+p99/+p99.9: the target's percentile minus direct's at the same rate (ms): what the proxy adds. gen lag: p99 of how late the generator sent the requests whose connection was free (its own timers and core, not charged to the server)."
	local o p
	for lv in $RATE_LEVELS; do
		for p in ringlb floor caddy traefik; do
			for o in nginx haproxy floor caddy traefik; do
				[[ $p != "$o" && ($p == ringlb || $o == nginx || $o == haproxy) ]] || continue
				[[ -n ${RMED[$p.$lv.p99]:-} && -n ${RMED[$o.$lv.p99]:-} ]] || continue
				printf '%s%%: %s/%-8s p99 %s  p99.9 %s   added over direct: p99 %s  p99.9 %s\n' "$lv" "$p" "$o" \
					"$(ratio "${RMED[$p.$lv.p99]}" "${RMED[$o.$lv.p99]}")" "$(ratio "${RMED[$p.$lv.p999]}" "${RMED[$o.$lv.p999]}")" \
					"$(ratio "${RMED[$p.$lv.d99]:--}" "${RMED[$o.$lv.d99]:--}")" "$(ratio "${RMED[$p.$lv.d999]:--}" "${RMED[$o.$lv.d999]:--}")"
			done
		done
	done
}

RATE_TABLE=""
if ((RATE && H1)); then
	if [[ -z $RATE_PEAK ]]; then
		read -r RATE_PEAK _ _ <<<"$(col nginx 4)"
		RATE_PEAK_FROM="nginx's median req/s in the runs above"
	else
		RATE_PEAK_FROM="RATE_PEAK"
	fi
	if [[ ! $RATE_PEAK =~ ^[0-9]+$ ]] || ((RATE_PEAK == 0)); then
		log "RATE: no peak to scale from (nginx not run and RATE_PEAK unset): constant-rate runs skipped"
		RATE=0
	fi
fi
if ((RATE && H1)); then
	(cd "$ROOT" && go build -o "$WORK/rate" ./bench/rate) || die "cannot build bench/rate"
	log "constant rate: ${RATE_LEVELS// /% }% of $RATE_PEAK req/s; ${ACTIVE[*]}; ${RATE_ROUNDS} round(s) x ${RATE_DUR_S}s"
	for lv in $RATE_LEVELS; do
		rt=$((RATE_PEAK * lv / 100))
		for r in $(seq 1 "$RATE_ROUNDS"); do
			for t in "${ACTIVE[@]}"; do
				sleep 1
				rate_measure "$t" "$lv" "$rt" "$r"
			done
		done
	done
	RATE_TABLE=$(rate_table)
fi

# ---------------------------------------------------------------- every feature's cost (FEATURES=1)

# One ringlb process per feature, each its plain config (the ringlb target's)
# plus that one feature, all pinned to the proxy core like the ringlb target
# and driven with the same wrk load, interleaved with the plain ringlb
# process itself in every round. A feature whose config this build refuses
# (ringlb validate) is skipped with the reason. Ratios are medians of the
# per-round ratios against plain ringlb in the same round.

declare -A FDESC=() FBASE=() FRSS=() FMED=() FNOTE=()
FACTIVE=()
FRUNS=$WORK/featruns.tsv
: >"$FRUNS"

# feature_config NAME -> the config of the ringlb process for NAME on stdout
feature_config() {
	local f=$1 port=$2 admin=$3 i j
	sed -e "s|^listen: .*|listen: 127.0.0.1:$port|" -e "s|^admin_listen: .*|admin_listen: 127.0.0.1:$admin|" "$WORK/ringlb.yaml" |
		case $f in
		pools) awk '/^hash:/ { exit } { print }' ;; # pools carry hash, ring and upstreams
		json) sed -e 's|^  key: \[uri\]|  key: [json: user]|' ;;
		prefix) awk -v k="$PREFIX_KEY" '/^  key: \[uri\]$/ { print "  key: " k; next } { print }' ;;
		handoffmoved) awk '{ print } /^    url: / && !done { print "    weight: 2"; done = 1 }' ;; # u1 at weight 2 until the reload
		alog) sed -e 's|^access_log: false|access_log: {format: json, path: '"$WORK"'/access.log}|' ;;
		*) cat ;;
		esac
	case $f in
	hold) echo "hold: {idle: 30m, on_return: stay}" ;;
	holdhome) echo "hold: {idle: 30m, on_return: home}" ;;
	handoff) echo "handoff: {header: Ringlb-Handoff, window: 5m}" ;;
	handoffmoved) echo "handoff: {header: Ringlb-Handoff, window: 24h}" ;;
	share) echo "hold: {idle: 30m, share: {redis: \"redis://127.0.0.1:$REDIS_PORT\"}}" ;;
	nolimits) echo "limits: {upstream_requests: 0, send: 0s}" ;;
	pools)
		echo "pools:"
		for i in $(seq 0 9); do
			echo "  p$i:"
			echo "    hash: {key: [uri]}"
			echo "    ring: {load_factor: 1.25}"
			echo "    upstreams:"
			for j in 1 2 3 4; do echo "      - {name: u$j, url: \"http://127.0.0.1:${UPORTS[j - 1]}\"}"; done
		done
		echo "routes:"
		for i in $(seq 0 89); do echo "  - {host: svc$i.example.com, pool: p$((i % 10))}"; done
		for i in $(seq 0 8); do echo "  - {path_prefix: /p$i, pool: p$i}"; done
		echo "  - {path_prefix: /k, pool: p9}"
		;;
	esac
}

# start_feature NAME INDEX: starts ringlb for feature NAME (not in a subshell:
# it sets URL, PIDS_OF and the others); on failure returns 1 with FWHY set.
start_feature() {
	local f=$1 i=$2 port=$((BASE_PORT + 90 + $2)) admin=$((BASE_PORT + 110 + $2)) bin=ringlb pid cf=$1
	local probe='{"user":"1"}'
	case $f in
	post) # the plain ringlb process, driven with POSTs: json's baseline
		URL[post]=${URL[$FPLAIN]} PIDS_OF[post]=${PIDS_OF[$FPLAIN]} SCRIPT[post]=post.lua FBASE[post]=$FPLAIN
		FDESC[post]="plain ringlb (the $FPLAIN process), POSTs with ${POST_BODY}-byte JSON bodies, uri key"
		return 0
		;;
	sse | ssedirect) # the plain ringlb process, or upstream u1 itself, serving event streams
		if [[ $f == sse ]]; then
			URL[sse]=${URL[$FPLAIN]} PIDS_OF[sse]=${PIDS_OF[$FPLAIN]}
			FDESC[sse]="plain ringlb (the $FPLAIN process), each request a text/event-stream of $SSE_EVENTS events (bench/sse.lua), $SSE_CONNS connection(s)"
		else
			URL[ssedirect]=${URL[direct]} PIDS_OF[ssedirect]=${UPIDS[0]}
			FDESC[ssedirect]="the same streams straight from upstream u1, $SSE_CONNS connection(s): sse's latency without ringlb (its CPU is u1's)"
		fi
		SCRIPT[$f]=sse.lua WRK_CONNS[$f]=$SSE_CONNS FBASE[$f]=""
		return 0
		;;
	chat4k | chat64k) # the plain ringlb process, chat completion POSTs: the prefix rows' baseline
		local size=${f#chat}
		size=$((${size%k} * 1024))
		URL[$f]=${URL[$FPLAIN]} PIDS_OF[$f]=${PIDS_OF[$FPLAIN]} SCRIPT[$f]=chat.lua WRK_ENV[$f]="CHAT_BODY=$size" FBASE[$f]=$FPLAIN
		FDESC[$f]="plain ringlb (the $FPLAIN process), POSTs of ${size}-byte chat completion bodies over $CHAT_KEYS conversations (bench/chat.lua), uri key"
		return 0
		;;
	prefix4k | prefix64k)
		cf=prefix
		probe='{"model":"m","messages":[{"role":"system","content":"Conversation 0."}]}'
		if [[ -n ${URL[prefix]:-} ]]; then # one process serves both sizes
			URL[$f]=${URL[prefix]} PIDS_OF[$f]=${PIDS_OF[prefix]} ADMIN_OF[$f]=${ADMIN_OF[prefix]}
			prefix_row "$f"
			return 0
		fi
		[[ -z ${FSKIP[prefix4k]:-} ]] || {
			FWHY=${FSKIP[prefix4k]}
			return 1
		}
		;;
	nohot)
		((HAVE_NOHOT)) || {
			FWHY="$NOHOT_SKIP"
			return 1
		}
		bin=ringlb-nohot
		;;
	share)
		command -v redis-server >/dev/null || {
			FWHY="redis-server not installed"
			return 1
		}
		if [[ -z $REDIS_PID ]]; then
			port_free "$REDIS_PORT" || {
				FWHY="port $REDIS_PORT (redis) is in use"
				return 1
			}
			"${LOAD[@]}" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
			REDIS_PID=$!
			PIDS+=("$REDIS_PID")
			EXTRA_PIDS+=("$REDIS_PID")
			for _ in $(seq 1 50); do
				[[ $( (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" && printf 'PING\r\n' >&3 && head -c 5 <&3) 2>/dev/null) == "+PONG" ]] && break
				sleep 0.1
			done
		fi
		;;
	esac
	port_free "$port" && port_free "$admin" || {
		FWHY="port $port or $admin is in use"
		return 1
	}
	feature_config "$cf" "$port" "$admin" >"$WORK/ringlb-$cf.yaml"
	if ! "$WORK/ringlb" validate -config "$WORK/ringlb-$cf.yaml" >"$WORK/ringlb-$cf-validate.log" 2>&1; then
		FWHY="this build refuses the config: $(grep -v '^$' "$WORK/ringlb-$cf-validate.log" | head -2 | tr '\n' ' ')"
		[[ $cf != prefix ]] || FWHY="$FWHY(hash.key: $PREFIX_KEY; set PREFIX_KEY to this build's form of the prefix source)"
		return 1
	fi
	GOMAXPROCS=1 "${PROXY[@]}" "$WORK/$bin" serve -config "$WORK/ringlb-$cf.yaml" >"$WORK/ringlb-$cf.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	if ! { wait_http "http://127.0.0.1:$port/k/0" "$pid" "ringlb ($f)" &&
		[[ $(curl -s --max-time 2 -H 'Content-Type: application/json' --data "$probe" "http://127.0.0.1:$port/k/0") == "ok from u"* ]]; }; then
		FWHY="ringlb serve ($f) did not come up: $(tail -3 "$WORK/ringlb-$cf.log" | tr '\n' ' ')"
		return 1
	fi
	URL[$f]="http://127.0.0.1:$port" PIDS_OF[$f]=$pid ADMIN_OF[$f]="127.0.0.1:$admin" FBASE[$f]=$FPLAIN
	if [[ $f == handoffmoved ]] && ! ring_moved "$pid"; then
		FWHY="ringlb ($f) did not reload its config with u1 at weight 1: $(tail -3 "$WORK/ringlb-$cf.log" | tr '\n' ' ')"
		return 1
	fi
	case $f in
	plain)
		FPLAIN=plain FBASE[plain]=plain
		FDESC[$f]="a fresh ringlb process with ringlb's config, started with the feature processes: the base of the rows below"
		;;
	hold) FDESC[$f]="hold: {idle: 30m, on_return: stay} (stay is the default), steady state (every path recorded during the warm-up)" ;;
	holdhome) FDESC[$f]="hold: {idle: 30m, on_return: home}, steady state (every path recorded during the warm-up)" ;;
	handoff) FDESC[$f]="handoff: {header: Ringlb-Handoff, window: 5m}, the ring unchanged since the start: no key moved, no header sent" ;;
	handoffmoved) FDESC[$f]="handoff: {header: Ringlb-Handoff, window: 24h}, started with u1 at weight 2 and reloaded (SIGHUP) at weight 1 before the runs: the keys u1 gave up carry the header, precomputed when the ring was made (the window outlasts the rounds)" ;;
	prefix4k | prefix64k)
		URL[prefix]=${URL[$f]} PIDS_OF[prefix]=$pid ADMIN_OF[prefix]=${ADMIN_OF[$f]}
		prefix_row "$f"
		;;
	share) FDESC[$f]="hold: {idle: 30m, share: {redis: ...}}, a redis-server on the load core; steady state (no lookups)" ;;
	pools) FDESC[$f]="10 pools (the same 4 upstreams each) and 100 routes; every request matches the last route (90 host routes and 9 path routes before it)" ;;
	alog) FDESC[$f]="access_log: {format: json, path: FILE}" ;;
	nohot) FDESC[$f]="hot keys counting compiled out (go build -overlay: hotkeys.Counter.Add returns at once); cost of hot keys = plain - this" ;;
	nolimits) FDESC[$f]="limits: {upstream_requests: 0, send: 0s}; cost of the default limits = plain - this" ;;
	json) FDESC[$f]="hash.key: [json: user], POSTs with ${POST_BODY}-byte JSON bodies; against post" SCRIPT[$f]=post.lua FBASE[$f]=post ;;
	esac
}

# prefix_row NAME: the prefix row of that size, against the chat row of the same size.
prefix_row() {
	local f=$1 size=${1#prefix}
	size=$((${size%k} * 1024))
	SCRIPT[$f]=chat.lua WRK_ENV[$f]="CHAT_BODY=$size" FBASE[$f]=chat${f#prefix}
	FDESC[$f]="hash.key: $PREFIX_KEY, POSTs of ${size}-byte chat completion bodies over $CHAT_KEYS conversations (bench/chat.lua); against chat${f#prefix}"
}

# ring_moved PID: the handoffmoved process's config rewritten with u1 at
# weight 1, as plain's, and reloaded; true once the process logs a second
# ring version (within 10 s).
ring_moved() {
	local pid=$1 i
	awk '!/^    weight: 2$/' "$WORK/ringlb-handoffmoved.yaml" >"$WORK/ringlb-handoffmoved.yaml.new" &&
		mv "$WORK/ringlb-handoffmoved.yaml.new" "$WORK/ringlb-handoffmoved.yaml" && kill -HUP "$pid" || return 1
	for i in $(seq 1 100); do
		(($(grep -c 'msg="ring version"' "$WORK/ringlb-handoffmoved.log") >= 2)) && return 0
		sleep 0.1
	done
	return 1
}

# handoffs TARGET: the sum of ringlb_handoffs_total, or "-".
handoffs() {
	curl -s --max-time 2 "http://${ADMIN_OF[$1]}/metrics" | awk '/^ringlb_handoffs_total/ { n += $NF; seen = 1 } END { if (seen) print n; else print "-" }'
}

# share_lookups TARGET: the sum of ringlb_hold_share_lookups_total, or "-".
share_lookups() {
	curl -s --max-time 2 "http://${ADMIN_OF[$1]}/metrics" | awk '/^ringlb_hold_share_lookups_total/ { n += $NF; seen = 1 } END { if (seen) print n; else print "-" }'
}

fcol() { # target column -> "median min max" over kept feature runs
	awk -F'\t' -v t="$1" -v c="$2" '$1 == t && $14 == 1 && $c != "-" && $5 > 0 { print $c }' "$FRUNS" | stats
}

# fpaired TARGET BASE COLUMN -> "median min max" of TARGET/BASE per round
fpaired() {
	awk -F'\t' -v t="$1" -v b="$2" -v c="$3" '
		$14 == 1 && $5 > 0 && $c != "-" && ($1 == t || $1 == b) { v[$1, $2] = $c; r[$2] = 1 }
		END { for (i in r) if (((t, i) in v) && ((b, i) in v) && v[b, i] > 0) print v[t, i] / v[b, i] }' "$FRUNS" | stats
}

feature_table() {
	printf '%-12s %7s %8s %22s %8s %17s %17s %5s %6s %s\n' feature "req/s" "p99 ms" "CPU us/req (min..max)" "RSS MiB" "CPU vs base" "p99 vs base" runs noisy errors
	local f rps p99 c1 c2 c3 rc r1 r2 pc n noisy errs base
	for f in "${FACTIVE[@]}"; do
		read -r rps _ _ <<<"$(fcol "$f" 4)"
		read -r p99 _ _ <<<"$(fcol "$f" 7)"
		read -r c1 c2 c3 <<<"$(fcol "$f" 10)"
		base=${FBASE[$f]:-}
		rc=- pc=-
		if [[ -n $base && $base != "$f" ]]; then
			read -r rc r1 r2 <<<"$(fpaired "$f" "$base" 10)"
			[[ $rc == - ]] || rc=$(awk -v a="$rc" -v b="$r1" -v c="$r2" 'BEGIN { printf "%.2f (%.2f..%.2f)", a, b, c }')
			read -r pc r1 r2 <<<"$(fpaired "$f" "$base" 7)"
			[[ $pc == - ]] || pc=$(awk -v a="$pc" -v b="$r1" -v c="$r2" 'BEGIN { printf "%.2f (%.2f..%.2f)", a, b, c }')
		fi
		n=$(awk -F'\t' -v t="$f" '$1 == t && $14 == 1' "$FRUNS" | wc -l)
		noisy=$(awk -F'\t' -v t="$f" '$1 == t && $14 == 1 && $11 > 0.25' "$FRUNS" | wc -l)
		errs=$(awk -F'\t' -v t="$f" '$1 == t && $14 == 1 { e += $8 + $9 + ($5 == 0) } END { print e + 0 }' "$FRUNS")
		printf '%-12s %7s %8s %22s %8s %17s %17s %5s %6s %s\n' "$f" "$rps" "$p99" "$c1 ($c2..$c3)" "${FRSS[$f]:-}" "$rc" "$pc" "$n" "$noisy" "$errs"
	done
	for f in "${!FSKIP[@]}"; do printf '%-12s skipped: %s\n' "$f" "${FSKIP[$f]}"; done
	echo "base: $FPLAIN (the plain ringlb process, GETs) for every row but json, whose base is post (the same process, the same POSTs, the uri key), prefix4k and prefix64k, whose bases are chat4k and chat64k (the same process, the same chat POSTs, the uri key), and sse and ssedirect, which have none$([[ $FPLAIN == plain ]] && echo "; ringlb's row against it is how much the main rounds' ringlb process, running since the start, drifted")."
	echo "CPU/p99 vs base: median (min..max) over rounds of the row's figure divided by its base's in the same round."
	for f in "${FACTIVE[@]}"; do [[ $f == ringlb ]] || echo "$f: ${FDESC[$f]}${FNOTE[$f]:+; ${FNOTE[$f]}}"; done
}

declare -A FSKIP=() ADMIN_OF=()
FEAT_TABLE=""
if ((FEATURES && H1)); then
	if [[ -z ${PIDS_OF[ringlb]:-} ]]; then
		log "FEATURES: the ringlb target is not running: feature runs skipped"
		FEATURES=0
	fi
fi
if ((FEATURES && H1)); then
	HAVE_NOHOT=0
	NOHOT_SKIP=""
	hk="$ROOT/balancer/hotkeys/hotkeys.go"
	if awk '{ print } /^func \(hk \*Counter\) Add\(/ { print "\treturn // bench/run.sh nohot: hot keys counting compiled out"; n++ } END { exit n == 1 ? 0 : 1 }' "$hk" >"$WORK/hotkeys-off.go" 2>/dev/null; then
		printf '{"Replace": {"%s": "%s"}}\n' "$hk" "$WORK/hotkeys-off.go" >"$WORK/nohot-overlay.json"
		if (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -overlay "$WORK/nohot-overlay.json" -o "$WORK/ringlb-nohot" ./cmd/ringlb) >"$WORK/nohot-build.log" 2>&1; then
			HAVE_NOHOT=1
		else
			NOHOT_SKIP="go build -overlay failed: $(head -2 "$WORK/nohot-build.log" | tr '\n' ' ')"
		fi
	else
		NOHOT_SKIP="balancer/hotkeys/hotkeys.go has no func (hk *Counter) Add( to compile out"
	fi
	SCRIPT[ringlb]=paths.lua
	FACTIVE=(ringlb)
	FBASE[ringlb]=ringlb
	FPLAIN=ringlb # the base; plain, once started
	i=0
	for f in $FEATURE_LIST; do
		case $f in plain | hold | holdhome | share | pools | alog | nohot | nolimits | handoff | handoffmoved | post | json | sse | ssedirect | chat4k | prefix4k | chat64k | prefix64k) ;;
		*) die "unknown feature $f (plain hold holdhome share pools alog nohot nolimits handoff handoffmoved post json sse ssedirect chat4k prefix4k chat64k prefix64k)" ;;
		esac
		FWHY=""
		if start_feature "$f" "$i"; then
			FACTIVE+=("$f")
		else
			FSKIP[$f]=$FWHY
			log "SKIP feature $f: $FWHY"
		fi
		i=$((i + 1))
	done
	[[ $FPLAIN != plain ]] || FBASE[ringlb]=plain
	log "features: ${FACTIVE[*]}; ${FEATURE_ROUNDS} rounds x ${DUR_S}s; warm-up ${FEAT_WARM_S}s for hold and share (every path seen in it), ${WARM_S}s for the others"
	for f in "${FACTIVE[@]}"; do
		[[ $f != ringlb ]] || continue
		w=$WARM_S
		[[ $f != hold && $f != holdhome && $f != share ]] || w=$FEAT_WARM_S
		((w > 0)) || continue
		log "warm-up $f ${w}s"
		run_wrk "$w" "$f" >"$WORK/wrk-$f-warmup.txt" 2>&1
	done
	declare -A L0=()
	for f in "${FACTIVE[@]}"; do
		[[ $f != share ]] || L0[$f]=$(share_lookups "$f")
		[[ $f != handoff && $f != handoffmoved ]] || L0[$f]=$(handoffs "$f")
	done
	SAVED_RUNS=$RUNS
	RUNS=$FRUNS
	for r in $(seq 1 "$FEATURE_ROUNDS"); do
		for f in "${FACTIVE[@]}"; do
			sleep 1
			measure_kept "$f" "$r"
		done
	done
	RUNS=$SAVED_RUNS
	for f in "${FACTIVE[@]}"; do
		if [[ $f == share ]]; then
			FNOTE[share]="ringlb_hold_share_lookups_total moved by $(awk -v a="${L0[share]}" -v b="$(share_lookups share)" 'BEGIN { if (a == "-" || b == "-") print "?"; else print b - a }') over the measured rounds"
		fi
		if [[ $f == handoff || $f == handoffmoved ]]; then
			# the requests since L0: the measured windows' and their prewarm runs'
			freqs=$({ cat "$WORK/wrk-$f-"[0-9]*.txt 2>/dev/null || true; } | awk '/ requests in / { n += $1 } END { print n + 0 }')
			FNOTE[$f]="ringlb_handoffs_total moved by $(awk -v a="${L0[$f]}" -v b="$(handoffs "$f")" -v n="$freqs" 'BEGIN { if (a == "-" || b == "-") print "?"; else printf "%d, %.1f %% of the %d requests of the measured and prewarm runs,", b - a, n ? 100 * (b - a) / n : 0, n }') over the measured rounds"
		fi
		read -r -a tp <<<"${PIDS_OF[$f]}"
		FRSS[$f]=$(awk -v k="$(vmhwm_kib "${tp[@]}")" 'BEGIN { printf "%.1f", k / 1024 }')
	done
	if [[ " ${FACTIVE[*]} " == *" sse "* && " ${FACTIVE[*]} " == *" ssedirect "* ]]; then
		read -r c _ _ <<<"$(fcol sse 10)"
		read -r a _ _ <<<"$(fcol sse 6)"
		read -r b _ _ <<<"$(fcol ssedirect 6)"
		FNOTE[sse]=$(awk -v c="$c" -v a="$a" -v b="$b" -v n="$SSE_EVENTS" 'BEGIN {
			if (c == "-" || a == "-" || b == "-") { print "no figures"; exit }
			printf "ringlb CPU per event %.3f us (CPU/req / %d); latency added per event %.3f us (p50 of a whole stream minus ssedirect'"'"'s, / %d)", c / n, n, (a - b) * 1000 / n, n }')
	fi
	if [[ " ${FACTIVE[*]} " == *" alog "* ]]; then
		FNOTE[alog]="$(wc -l <"$WORK/access.log" 2>/dev/null || echo 0) lines written, first: $(head -c 300 "$WORK/access.log" 2>/dev/null | head -1)"
	fi
	FEAT_TABLE=$(feature_table)
fi

# ---------------------------------------------------------------- HTTP/2 over TLS (H2=1)

# The same three proxies, each a second process with TLS and HTTP/2 at the
# front (ALPN h2), HTTP/1.1 to the same four upstreams, the same hashing,
# driven by h2load instead of wrk: H2_CLIENTS connections with H2_STREAMS
# concurrent streams each, over the same BENCH_PATHS paths in the same
# order. h2load prints no percentiles; its --log-file has one line per
# request (start, status, microseconds to the end of the response), and
# p50/p99 come from that, the same "request sent to response complete"
# span wrk's --latency reports.

declare -A H2URL=() H2PIDS=() H2SKIP=() H2RSS=() H2MED=() H2SPREAD=()
H2ACTIVE=()
H2RUNS=$WORK/h2runs.tsv
: >"$H2RUNS"

h2_configs() {
	mkdir -p "$WORK/tls" "$WORK/nginx-h2/tmp" "$WORK/haproxy-h2"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
		-keyout "$WORK/tls/tls.key" -out "$WORK/tls/tls.crt" >"$WORK/tls/openssl.log" 2>&1 ||
		die "openssl could not make a certificate: $(tail -2 "$WORK/tls/openssl.log")"
	cat "$WORK/tls/tls.crt" "$WORK/tls/tls.key" >"$WORK/tls/haproxy.pem"
	chmod 644 "$WORK/tls/"* # nginx reads the key as root, but keep it simple for nobody too

	sed -e "s|^listen: .*|listen: 127.0.0.1:$H2_RINGLB_PORT|" \
		-e "s|^admin_listen: .*|admin_listen: 127.0.0.1:$H2_ADMIN_PORT|" "$WORK/ringlb.yaml" >"$WORK/ringlb-h2.yaml"
	cat >>"$WORK/ringlb-h2.yaml" <<EOF
tls:
  cert_file: $WORK/tls/tls.crt
  key_file: $WORK/tls/tls.key
http2: true
EOF

	sed -e "s|$WORK/nginx/|$WORK/nginx-h2/|g" \
		-e "s|listen 127.0.0.1:$NGINX_PORT;|listen 127.0.0.1:$H2_NGINX_PORT ssl http2;\\
        ssl_certificate $WORK/tls/tls.crt;\\
        ssl_certificate_key $WORK/tls/tls.key;\\
        ssl_protocols TLSv1.2 TLSv1.3;|" "$WORK/nginx/nginx.conf" >"$WORK/nginx-h2/nginx.conf"
	grep -q "listen 127.0.0.1:$H2_NGINX_PORT ssl http2;" "$WORK/nginx-h2/nginx.conf" || die "could not derive the nginx HTTP/2 config"

	# Over HTTP/2 HAProxy sees the absolute URI (scheme and authority from
	# :scheme and :authority): path-only hashes what HTTP/1.1 requests, nginx's
	# $request_uri and ringlb's uri key hash, the path and query.
	sed -e "s|bind 127.0.0.1:$HAPROXY_PORT|bind 127.0.0.1:$H2_HAPROXY_PORT ssl crt $WORK/tls/haproxy.pem alpn h2,http/1.1|" \
		-e "s|balance uri\$|balance uri path-only|" \
		"$WORK/haproxy/haproxy.cfg" >"$WORK/haproxy-h2/haproxy.cfg"
	grep -q "alpn h2" "$WORK/haproxy-h2/haproxy.cfg" && grep -q "balance uri path-only" "$WORK/haproxy-h2/haproxy.cfg" ||
		die "could not derive the HAProxy HTTP/2 config"
}

# wait_h2 URL PID NAME: until URL answers 200 over HTTP/2 with TLS, or PID dies, or 10 s.
wait_h2() {
	local url=$1 pid=$2 name=$3 i v
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		v=$(curl -sk --http2 --max-time 1 -o /dev/null -w '%{http_version} %{http_code}' "$url" 2>/dev/null) || v=
		[[ $v == "2 200" ]] && return 0
		sleep 0.1
	done
	log "$name did not answer 200 over HTTP/2 at $url within 10 s (last: ${v:-no answer})"
	return 1
}

h2_start() {
	local t=$1 pid workers
	case $t in
	floor)
		((HAVE_FLOOR)) || {
			H2SKIP[floor]=$FLOOR_SKIP
			return
		}
		GOMAXPROCS=1 "${PROXY[@]}" "$WORK/floor" -server std -listen "127.0.0.1:$H2_FLOOR_PORT" -tls-cert "$WORK/tls/tls.crt" -tls-key "$WORK/tls/tls.key" $(floor_upstreams) >"$WORK/floor-h2.log" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		if wait_h2 "https://127.0.0.1:$H2_FLOOR_PORT/k/0" "$pid" "floor (h2)"; then
			H2PIDS[floor]=$pid
		else
			H2SKIP[floor]="bench/floor does not answer over TLS and HTTP/2: $(tail -2 "$WORK/floor-h2.log" | tr '\n' ' ')"
		fi
		;;
	ringlb)
		((HAVE_RINGLB)) || {
			H2SKIP[ringlb]=$RINGLB_SKIP
			return
		}
		GOMAXPROCS=1 "${PROXY[@]}" "$WORK/ringlb" serve -config "$WORK/ringlb-h2.yaml" >"$WORK/ringlb-h2.log" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		if wait_h2 "https://127.0.0.1:$H2_RINGLB_PORT/k/0" "$pid" "ringlb (h2)"; then
			H2PIDS[ringlb]=$pid
		else
			H2SKIP[ringlb]="ringlb serve does not answer over TLS and HTTP/2 on its tls listener: $(tail -2 "$WORK/ringlb-h2.log" | tr '\n' ' ')"
		fi
		;;
	nginx)
		command -v nginx >/dev/null || {
			H2SKIP[nginx]="nginx not installed"
			return
		}
		"${PROXY[@]}" nginx -p "$WORK/nginx-h2/" -e "$WORK/nginx-h2/error.log" -c "$WORK/nginx-h2/nginx.conf" >"$WORK/nginx-h2/stdout.log" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		if ! wait_h2 "https://127.0.0.1:$H2_NGINX_PORT/k/0" "$pid" "nginx (h2)"; then
			H2SKIP[nginx]="nginx did not come up with TLS and HTTP/2: $(tail -3 "$WORK/nginx-h2/error.log" "$WORK/nginx-h2/stdout.log" 2>/dev/null | tr '\n' ' ')"
			return
		fi
		workers=$(pgrep -P "$pid" | tr '\n' ' ')
		[[ -n $workers ]] || {
			H2SKIP[nginx]="nginx has no worker process"
			return
		}
		# shellcheck disable=SC2206
		PIDS+=($workers)
		H2PIDS[nginx]="$pid $workers"
		;;
	haproxy)
		command -v haproxy >/dev/null || {
			H2SKIP[haproxy]="haproxy not installed"
			return
		}
		"${PROXY[@]}" haproxy -db -f "$WORK/haproxy-h2/haproxy.cfg" >"$WORK/haproxy-h2/haproxy.log" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		if wait_h2 "https://127.0.0.1:$H2_HAPROXY_PORT/k/0" "$pid" "haproxy (h2)"; then
			H2PIDS[haproxy]=$pid
		else
			H2SKIP[haproxy]="haproxy did not come up with TLS and HTTP/2: $(tail -3 "$WORK/haproxy-h2/haproxy.log" | tr '\n' ' ')"
		fi
		;;
	esac
}

# h2_uris TARGET: h2load's input file, the paths of bench/paths.lua in its order.
h2_uris() {
	local t=$1 port
	case $t in floor) port=$H2_FLOOR_PORT ;; ringlb) port=$H2_RINGLB_PORT ;; nginx) port=$H2_NGINX_PORT ;; haproxy) port=$H2_HAPROXY_PORT ;; esac
	H2URL[$t]="https://127.0.0.1:$port"
	awk -v n="$BENCH_PATHS" -v u="${H2URL[$t]}" '
		function gcd(a, b,   r) { while (b != 0) { r = a % b; a = b; b = r }; return a }
		BEGIN { s = 7919; if (gcd(n, s) != 1) s = 1; for (i = 0; i < n; i++) print u "/k/" (i * s) % n }' >"$WORK/h2-uris-$t.txt"
}

h2load_cmd() { # target seconds [log file] -> the h2load command line
	echo "${LOAD[*]}${LOAD[*]:+ }h2load -t1 -c$H2_CLIENTS -m$H2_STREAMS -D$2 -i h2-uris-$1.txt${3:+ --log-file=$3}"
}

# run_h2load SECONDS TARGET [LOGFILE]: in the background, waited for (see run_wrk).
run_h2load() {
	local secs=$1 t=$2 lf=${3:-}
	(cd "$WORK" && exec "${LOAD[@]}" h2load -t1 -c"$H2_CLIENTS" -m"$H2_STREAMS" -D"$secs" -i "h2-uris-$t.txt" ${lf:+--log-file="$lf"}) &
	WRK_PID=$!
	wait "$WRK_PID" || true
	WRK_PID=
}

# parse_h2load OUT LOG -> "rps requests p50_ms p99_ms non2xx failed"
# OUT is h2load's summary ("requests: N total, N started, N done, N
# succeeded, N failed, N errored, N timeout"); LOG its --log-file, one line
# per finished request: start_us <TAB> status <TAB> microseconds to the end
# of the response. Percentiles are nearest-rank over every request.
parse_h2load() {
	local rps reqs failed pct bad
	read -r rps reqs failed <<<"$(awk '
		/^finished in / { rps = $4 + 0 }
		/^requests: / { done = $6; fail = $10 + $12 + $14 }
		END { printf "%.0f %d %d\n", rps, done, fail }' "$1")"
	bad=$(awk -F'\t' '$2 < 200 || $2 > 399 { n++ } END { print n + 0 }' "$2")
	pct=$(cut -f3 "$2" | sort -n | awk '
		{ v[NR] = $1 }
		function rank(p,   i) { i = int(NR * p); if (i < NR * p) i++; return i < 1 ? 1 : i }
		END { if (NR == 0) print "- -"; else printf "%.3f %.3f\n", v[rank(0.50)] / 1000, v[rank(0.99)] / 1000 }')
	echo "$rps $reqs $pct $bad $failed"
}

# h2_measure TARGET ROUND: one measured h2load run; appends to H2RUNS.
h2_measure() {
	local t=$1 r=$2 out="$WORK/h2load-$1-$2.txt" lf="$WORK/h2load-$1-$2.log"
	local -a tp
	read -r -a tp <<<"${H2PIDS[$t]}"
	local before="$WORK/snap.before" after="$WORK/snap.after" s0 s1 t0 t1 w fticks
	((PREWARM_S == 0)) || run_h2load "$PREWARM_S" "$t" >"$WORK/h2load-$t-$r-prewarm.txt" 2>&1
	snapshot_all >"$before"
	s0=$(ticks "${tp[@]}")
	t0=$(date +%s.%N)
	run_h2load "$DUR_S" "$t" "$lf" >"$out" 2>&1
	t1=$(date +%s.%N)
	s1=$(ticks "${tp[@]}")
	snapshot_all >"$after"
	fticks=$(foreign_ticks "$before" "$after" $$ "${UPIDS[@]}" "${tp[@]}")
	local rps reqs p50 p99 bad failed cpu_us fcores note=""
	read -r rps reqs p50 p99 bad failed <<<"$(parse_h2load "$out" "$lf")"
	w=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	cpu_us=$(awk -v d=$((s1 - s0)) -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { if (n > 0) printf "%.2f", d / hz * 1e6 / n; else print "-" }')
	fcores=$(awk -v f="$fticks" -v hz="$CLK_TCK" -v w="$w" 'BEGIN { printf "%.2f", f / hz / w }')
	((reqs > 0)) || note="h2load failed: $(tail -2 "$out" | tr '\n' ' ')"
	((bad == 0 && failed == 0)) || note="${note:+$note; }non2xx=$bad failed=$failed"
	rm -f "$lf"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$r" "$rps" "$reqs" "$p50" "$p99" "$bad" "$failed" "$cpu_us" "$fcores" "$note" >>"$H2RUNS"
	log "$(printf '%-8s h2 r%s %7s req/s  p50 %7sms  p99 %8sms  cpu %6s us/req  foreign %5s cores%s' \
		"$t" "$r" "$rps" "$p50" "$p99" "$cpu_us" "$fcores" "${note:+  [$note]}")"
}

h2col() { # target column -> "median min max"
	awk -F'\t' -v t="$1" -v c="$2" '$1 == t && $c != "-" && $4 > 0 { print $c }' "$H2RUNS" | stats
}

h2_table() {
	printf '%-9s %8s %8s %9s %24s %8s %5s %6s %s\n' target "rps" "p50 ms" "p99 ms" "CPU us/req (min..max)" "RSS MiB" "runs" "noisy" "errors"
	local t rps p50 p99 m1 m2 m3 n noisy errs o
	for t in "${H2ACTIVE[@]}"; do
		read -r rps _ _ <<<"$(h2col "$t" 3)"
		read -r p50 _ _ <<<"$(h2col "$t" 5)"
		read -r p99 _ _ <<<"$(h2col "$t" 6)"
		read -r m1 m2 m3 <<<"$(h2col "$t" 9)"
		n=$(awk -F'\t' -v t="$t" '$1 == t' "$H2RUNS" | wc -l)
		noisy=$(awk -F'\t' -v t="$t" '$1 == t && $10 > 0.25' "$H2RUNS" | wc -l)
		errs=$(awk -F'\t' -v t="$t" '$1 == t { e += $7 + $8 + ($4 == 0) } END { print e + 0 }' "$H2RUNS")
		H2MED[$t.cpu]=$m1
		H2MED[$t.p99]=$p99
		H2MED[$t.rss]=${H2RSS[$t]}
		printf '%-9s %8s %8s %9s %24s %8s %5s %6s %s\n' "$t" "$rps" "$p50" "$p99" "$m1 ($m2..$m3)" "${H2RSS[$t]}" "$n" "$noisy" "$errs"
	done
	for t in "${!H2SKIP[@]}"; do printf '%-9s skipped: %s\n' "$t" "${H2SKIP[$t]}"; done
	echo "HTTP/2 over TLS (h2load -c$H2_CLIENTS -m$H2_STREAMS), HTTP/1.1 to the upstreams; p50/p99 from h2load's per-request log."
	echo "errors: non-2xx responses + failed/errored/timed-out requests + failed h2load runs (should be 0)."
	[[ -z ${H2MED[floor.cpu]:-} ]] || echo "floor: bench/floor with TLS, net/http's own HTTP/2 server at its defaults, ReverseProxy and ringlb's HTTP/1.1 transport."
	local p
	for p in ringlb floor; do
		for o in nginx haproxy; do
			[[ -n ${H2MED[$p.cpu]:-} && -n ${H2MED[$o.cpu]:-} ]] || continue
			printf '%s/%-8s CPU/req %s   p99 %s   RSS %s\n' "$p" "$o" \
				"$(ratio "${H2MED[$p.cpu]}" "${H2MED[$o.cpu]}")" "$(ratio "${H2MED[$p.p99]}" "${H2MED[$o.p99]}")" "$(ratio "${H2MED[$p.rss]}" "${H2MED[$o.rss]}")"
		done
	done
	if [[ -n ${H2MED[ringlb.cpu]:-} && -n ${H2MED[floor.cpu]:-} ]]; then
		printf 'ringlb/floor    CPU/req %s   p99 %s   RSS %s\n' \
			"$(ratio "${H2MED[ringlb.cpu]}" "${H2MED[floor.cpu]}")" "$(ratio "${H2MED[ringlb.p99]}" "${H2MED[floor.p99]}")" "$(ratio "${H2MED[ringlb.rss]}" "${H2MED[floor.rss]}")"
	fi
}

if [[ $H2 != 0 ]]; then
	h2_configs
	for t in $TARGETS; do
		case $t in
		direct) continue ;; # the upstreams speak HTTP/1.1 only: no HTTP/2 ceiling
		floor | ringlb | nginx | haproxy) h2_start "$t" ;;
		*) continue ;;
		esac
		if [[ -n ${H2SKIP[$t]:-} ]]; then
			log "SKIP $t (h2): ${H2SKIP[$t]}"
		else
			h2_uris "$t"
			H2ACTIVE+=("$t")
		fi
	done
	if ((${#H2ACTIVE[@]})); then
		log "HTTP/2 over TLS: ${H2ACTIVE[*]}; ${ROUNDS} rounds x ${DUR_S}s, h2load -c$H2_CLIENTS -m$H2_STREAMS"
		if ((WARM_S > 0)); then
			for t in "${H2ACTIVE[@]}"; do
				log "warm-up $t (h2) ${WARM_S}s"
				run_h2load "$WARM_S" "$t" >"$WORK/h2load-$t-warmup.txt" 2>&1
			done
		fi
		for r in $(seq 1 "$ROUNDS"); do
			for t in "${H2ACTIVE[@]}"; do
				sleep 1
				h2_measure "$t" "$r"
			done
		done
		for t in "${H2ACTIVE[@]}"; do
			read -r -a tp <<<"${H2PIDS[$t]}"
			H2RSS[$t]=$(awk -v k="$(vmhwm_kib "${tp[@]}")" 'BEGIN { printf "%.1f", k / 1024 }')
		done
		for t in "${H2ACTIVE[@]}"; do
			H2SPREAD[$t]=$(spread "$t-h2" "${H2URL[$t]}" -k --http2)
			log "spread $t (h2, ${SPREAD_N} paths x 2): ${H2SPREAD[$t]}"
		done
	else
		log "HTTP/2 over TLS: no target to run"
	fi
fi

# ---------------------------------------------------------------- report

table() {
	printf '%-9s %8s %8s %9s %24s %8s %5s %6s %s\n' target "rps" "p50 ms" "p99 ms" "CPU us/req (min..max)" "RSS MiB" "runs" "noisy" "errors"
	local t rps p50 p99 cpu n m1 m2 m3 errs noisy
	for t in "${ACTIVE[@]}"; do
		read -r rps _ _ <<<"$(col "$t" 4)"
		read -r p50 _ _ <<<"$(col "$t" 6)"
		read -r p99 _ _ <<<"$(col "$t" 7)"
		read -r m1 m2 m3 <<<"$(col "$t" 10)"
		cpu="$m1 ($m2..$m3)"
		n=$(awk -F'\t' -v t="$t" '$1 == t && $14 == 1' "$RUNS" | wc -l)
		noisy=$(awk -F'\t' -v t="$t" '$1 == t && $14 == 1 && $11 > 0.25' "$RUNS" | wc -l)
		errs=$(awk -F'\t' -v t="$t" '$1 == t && $14 == 1 { e += $8 + $9 + ($5 == 0) } END { print e + 0 }' "$RUNS")
		MED[$t.cpu]=$m1
		MED[$t.p99]=$p99
		MED[$t.rss]=${RSS[$t]}
		printf '%-9s %8s %8s %9s %24s %8s %5s %6s %s\n' "$([[ $t == direct ]] && echo 'direct*' || echo "$t")" "$rps" "$p50" "$p99" "$cpu" "${RSS[$t]}" "$n" "$noisy" "$errs"
	done
	for t in "${!SKIP[@]}"; do printf '%-9s skipped: %s\n' "$t" "${SKIP[$t]}"; done
	echo "* direct: wrk straight at upstream u1 (the ceiling); its CPU and RSS are that upstream's own."
	echo "noisy: kept runs whose foreign load stayed above 0.25 core even on the repeat (distrust those)."
	echo "errors: non-2xx responses + socket errors + failed wrk runs, over the kept runs (should be 0)."
	echo "floor: bench/floor, net/http's server + httputil.ReverseProxy + ringlb's HTTP/1.1 transport, hashing with nothing else."
	[[ -z ${MED[lean.cpu]:-} ]] || echo "lean: floor with a bare server loop (bench/floor/lean.go) in place of net/http's server: a measurement, not a server."
	[[ -z ${MED[caddy.cpu]:-} ]] || echo "caddy: reverse_proxy, lb_policy uri_hash (rendezvous hashing of the request URI, no bounded loads)."
	[[ -z ${MED[traefik.cpu]:-} ]] || echo "traefik: weighted round robin with its sticky cookie; every request carries the cookie naming its path's upstream (bench/sticky.lua)."
	local o p
	for p in ringlb floor lean caddy traefik; do
		for o in nginx haproxy caddy traefik; do
			# Caddy and Traefik against nginx and HAProxy, ringlb against all four.
			[[ $p != "$o" && ($p == ringlb || $o == nginx || $o == haproxy) ]] || continue
			[[ -n ${MED[$p.cpu]:-} && -n ${MED[$o.cpu]:-} ]] || continue
			printf '%s/%-8s CPU/req %s   p99 %s   RSS %s\n' "$p" "$o" \
				"$(ratio "${MED[$p.cpu]}" "${MED[$o.cpu]}")" "$(ratio "${MED[$p.p99]}" "${MED[$o.p99]}")" "$(ratio "${MED[$p.rss]}" "${MED[$o.rss]}")"
		done
	done
	if [[ -n ${MED[ringlb.cpu]:-} && -n ${MED[floor.cpu]:-} ]]; then
		printf 'ringlb/floor    CPU/req %s   p99 %s   RSS %s\n' \
			"$(ratio "${MED[ringlb.cpu]}" "${MED[floor.cpu]}")" "$(ratio "${MED[ringlb.p99]}" "${MED[floor.p99]}")" "$(ratio "${MED[ringlb.rss]}" "${MED[floor.rss]}")"
	fi
}

TABLE=""
if ((H1)); then
	TABLE=$(table)
	echo
	echo "ringlb bench: $(date -u '+%Y-%m-%d %H:%M UTC'), ${ROUNDS} rounds x ${DUR_S}s, wrk -t1 -c$CONNS over $BENCH_PATHS paths, pinned=$PINNED"
	echo "$TABLE"
	for t in "${ACTIVE[@]}"; do [[ -n ${SPREAD[$t]:-} ]] && printf 'spread %-8s %s\n' "$t" "${SPREAD[$t]}"; done
fi
if [[ -n $RATE_TABLE ]]; then
	echo
	echo "ringlb bench, constant rate: bench/rate (wrk2-style, no coordinated omission) at ${RATE_LEVELS// /%, }% of $RATE_PEAK req/s"
	echo "$RATE_TABLE"
fi
if [[ -n $FEAT_TABLE ]]; then
	echo
	echo "ringlb bench, every feature's cost: ${FEATURE_ROUNDS} rounds x ${DUR_S}s, wrk -t1 -c$CONNS, interleaved with plain ringlb"
	echo "$FEAT_TABLE"
fi
H2TABLE=""
if [[ $H2 != 0 ]]; then
	H2TABLE=$(h2_table)
	echo
	echo "ringlb bench, HTTP/2 over TLS: $(date -u '+%Y-%m-%d %H:%M UTC'), ${ROUNDS} rounds x ${DUR_S}s, h2load -t1 -c$H2_CLIENTS -m$H2_STREAMS over $BENCH_PATHS paths, pinned=$PINNED"
	echo "$H2TABLE"
	for t in "${H2ACTIVE[@]}"; do [[ -n ${H2SPREAD[$t]:-} ]] && printf 'spread %-8s %s\n' "$t" "${H2SPREAD[$t]}"; done
fi

[[ -n $RESULTS ]] || exit 0

redact() { sed "s|$WORK|\$WORK|g" "$1"; }
version_lines() {
	echo "- $(go version)"
	if ((HAVE_RINGLB)); then
		echo "- ringlb $(git -C "$ROOT" describe --always --dirty --tags 2>/dev/null || echo "(no commit yet)")"
	fi
	command -v nginx >/dev/null && echo "- $(nginx -v 2>&1 | head -1)"
	command -v haproxy >/dev/null && echo "- $( (haproxy -v 2>&1 || true) | head -1)"
	[[ " ${ACTIVE[*]} " != *" caddy "* ]] || echo "- caddy $(go version -m "$CADDY" 2>/dev/null | awk '$1 == "mod" { print $3; exit }') ($(go version "$CADDY" 2>/dev/null | awk '{ print $2 }'), $CADDY)"
	[[ " ${ACTIVE[*]} " != *" traefik "* ]] || echo "- traefik $("$TRAEFIK" version 2>/dev/null | awk '$1 == "Version:" { print $2; exit }') ($(go version "$TRAEFIK" 2>/dev/null | awk '{ print $2 }'), $TRAEFIK)"
	((!H1)) || echo "- $( (wrk -v 2>&1 || true) | head -1)"
	if [[ $H2 != 0 ]]; then
		echo "- $(h2load --version 2>&1 | head -1)"
		echo "- $(openssl version 2>&1 | head -1) (the proxies' own TLS libraries may differ: ringlb uses Go's crypto/tls)"
	fi
	echo "- kernel $(uname -r), $NCPU cpus: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
	echo "- load average at start: $LOADAVG_START; at end: $(cut -d' ' -f1-3 /proc/loadavg)"
}

{
	echo "# ringlb benchmark results"
	echo
	echo "Written by \`bench/run.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'). See [README.md](README.md) for how to read it."
	echo
	echo "## Command"
	echo
	echo '```'
	echo "$INVOCATION"
	for t in "${ACTIVE[@]}"; do echo "# $t: $(wrk_cmd "$t" "$DUR_S")"; done
	[[ -z $RATE_TABLE ]] || for t in "${ACTIVE[@]}"; do echo "# $t at a constant rate: $(rate_cmd "$t" RATE "$RATE_DUR_S")"; done
	[[ -z $FEAT_TABLE ]] || for t in "${FACTIVE[@]}"; do [[ $t == ringlb ]] || echo "# feature $t: $(wrk_cmd "$t" "$DUR_S")"; done
	for t in "${H2ACTIVE[@]}"; do echo "# $t (HTTP/2 over TLS): (cd \$WORK && $(h2load_cmd "$t" "$DUR_S" h2load.log))"; done
	echo '```'
	echo
	echo "Pinning: $([[ $PINNED == 1 ]] && echo "proxy on cpu $PROXY_CPU (ringlb GOMAXPROCS=1, nginx 1 worker, HAProxy nbthread 1); wrk and the four upstreams (GOMAXPROCS=1 each) on cpu $LOAD_CPU" || echo "off")."
	echo
	echo "## Versions"
	echo
	version_lines
	echo
	if ((H1)); then
	echo "## Summary (medians over the kept runs)"
	echo
	echo '```'
	echo "$TABLE"
	echo '```'
	echo
	echo "## Spread and stickiness ($SPREAD_N distinct paths, each sent twice, at rest)"
	echo
	for t in "${ACTIVE[@]}"; do [[ -n ${SPREAD[$t]:-} ]] && echo "- $t: ${SPREAD[$t]}"; done
	echo
	echo "## Every run"
	echo
	echo "foreign = CPU of every other process during the window, in cores; a run above 0.25 is dropped and repeated once."
	echo "load/proxy cpu = how busy the two cores were (all processes) during the window."
	echo "core us/req = everything the proxy's core did during the window (the proxy, kernel work, any neighbour) per request: equal to CPU us/req on a quiet machine; a gap means something else ran there."
	echo "upstream conns = connections the upstreams accepted during the window (for direct, beyond wrk's $CONNS): near 0 when the proxy keeps its upstream connections alive."
	echo
	echo "| target | round | attempt | req/s | requests | p50 ms | p99 ms | CPU us/req | core us/req | foreign cores | load cpu % | proxy cpu % | upstream conns | kept | note |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $10, $17, $11, $12, $13, $16, ($14 == 1 ? "yes" : "no"), $15 }' "$RUNS"
	echo
	echo "## Spreads (min..max over kept runs)"
	echo
	for t in "${ACTIVE[@]}"; do
		read -r _ a b <<<"$(col "$t" 4)"
		read -r _ c d <<<"$(col "$t" 7)"
		read -r _ e f <<<"$(col "$t" 10)"
		echo "- $t: req/s $a..$b, p99 ${c}..${d} ms, CPU $e..$f us/req"
	done
	echo
	fi
	if [[ -n $RATE_TABLE ]]; then
		echo "## Latency at a constant rate"
		echo
		echo "The same processes, driven by \`bench/rate\` (GOMAXPROCS=1, on the load core) at ${RATE_LEVELS// /%, }% of $RATE_PEAK req/s ($RATE_PEAK_FROM), $RATE_CONNS keep-alive connections, the same paths in the same order as wrk. Each connection's requests are due at fixed times; a request held back by a slow response is timed from when it was due (no coordinated omission, as wrk2), one sent on time from when it was written. p50/p99/p99.9/max are nearest-rank over every response of the window; +p50/+p99/+p99.9 subtract direct's at the same rate."
		echo
		echo '```'
		echo "$RATE_TABLE"
		echo '```'
		echo
		echo "| target | load % | rate | round | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | gen lag p99 ms | errors | CPU us/req | foreign cores | load cpu % | proxy cpu % |"
		echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
		awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16 }' "$RRUNS"
		echo
	fi
	if [[ -n $FEAT_TABLE ]]; then
		echo "## Every feature's cost"
		echo
		echo "One ringlb process per feature (the plain config plus that feature, pinned like ringlb), driven by the same wrk load and interleaved with the plain ringlb process in every round; runs with foreign load above 0.25 core are dropped and repeated once, as above."
		echo
		echo '```'
		echo "$FEAT_TABLE"
		echo '```'
		echo
		echo "| target | round | attempt | req/s | requests | p50 ms | p99 ms | CPU us/req | core us/req | foreign cores | load cpu % | proxy cpu % | upstream conns | kept | note |"
		echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
		awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $10, $17, $11, $12, $13, $16, ($14 == 1 ? "yes" : "no"), $15 }' "$FRUNS"
		echo
		for f in "${FACTIVE[@]}"; do
			[[ -f $WORK/ringlb-$f.yaml ]] || continue
			echo "ringlb, feature $f (\`ringlb serve -config ringlb-$f.yaml\`$([[ $f == nohot ]] && echo ", built with \`go build -overlay\` replacing balancer/hotkeys/hotkeys.go by a copy whose Counter.Add returns at once")):"
			echo
			echo '```yaml'
			if [[ $f == pools ]]; then
				redact "$WORK/ringlb-$f.yaml" | awk '/^routes:/ { r = 1 } r && /^  - / { n++; if (n == 4) print "  # ... 96 more: host svc3..svc89.example.com, then path_prefix /p0 .. /p8"; if (n > 3 && n < 100) next } /^  p[1-9]:/ { skip = 1 } /^  p9:/ || /^routes:/ { skip = 0 } skip { if (!said++) print "  # p1 .. p8: as p0"; next } { print }'
			else
				redact "$WORK/ringlb-$f.yaml"
			fi
			echo '```'
			echo
		done
	fi
	if [[ $H2 != 0 ]]; then
		echo "## HTTP/2 over TLS (medians over the runs)"
		echo
		echo "TLS and HTTP/2 (ALPN h2) at the front with a self-signed P-256 certificate, HTTP/1.1 to the same upstreams, the same hashing; h2load opens $H2_CLIENTS connections with up to $H2_STREAMS streams in flight on each, over the same paths in the same order as wrk. p50 and p99 are nearest-rank percentiles of h2load's per-request log (request sent to response complete); the run's TLS handshakes are included in its CPU."
		echo
		echo '```'
		echo "$H2TABLE"
		echo '```'
		echo
		for t in "${H2ACTIVE[@]}"; do [[ -n ${H2SPREAD[$t]:-} ]] && echo "- spread and stickiness, $t over HTTP/2: ${H2SPREAD[$t]}"; done
		echo
		echo "| target | round | req/s | requests | p50 ms | p99 ms | CPU us/req | foreign cores | non-2xx | failed | note |"
		echo "|---|---|---|---|---|---|---|---|---|---|---|"
		awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $9, $10, $7, $8, $11 }' "$H2RUNS"
		echo
	fi
	echo "## Configs"
	echo
	echo "Upstreams: \`GOMAXPROCS=1 upstream $([[ $RAW_UPSTREAM == 1 ]] && echo '-raw ')-listen 127.0.0.1:PORT -name uN\` on ports ${UPORTS[*]} (bench/upstream)."
	if [[ " ${ACTIVE[*]} " == *" floor "* ]]; then
		echo
		echo "floor: \`GOMAXPROCS=1 floor -server std -listen 127.0.0.1:$FLOOR_PORT$(floor_upstreams)\` (bench/floor; its transport and timeouts are ringlb's defaults)."
	fi
	if [[ " ${ACTIVE[*]} " == *" lean "* ]]; then
		echo
		echo "lean: \`GOMAXPROCS=1 floor -server lean -listen 127.0.0.1:$LEAN_PORT$(floor_upstreams)\` (bench/floor/lean.go)."
	fi
	if [[ " ${ACTIVE[*]} " == *" ringlb "* ]]; then
		echo
		echo "ringlb (\`ringlb serve -config ringlb.yaml\`):"
		echo
		echo '```yaml'
		redact "$WORK/ringlb.yaml"
		echo '```'
	fi
	if [[ " ${ACTIVE[*]} " == *" nginx "* ]]; then
		echo
		echo "nginx (\`nginx -p \$WORK/nginx/ -e \$WORK/nginx/error.log -c \$WORK/nginx/nginx.conf\`):"
		echo
		echo '```nginx'
		redact "$WORK/nginx/nginx.conf"
		echo '```'
	fi
	if [[ " ${ACTIVE[*]} " == *" haproxy "* ]]; then
		echo
		echo "HAProxy (\`haproxy -db -f haproxy.cfg\`):"
		echo
		echo '```'
		redact "$WORK/haproxy/haproxy.cfg"
		echo '```'
	fi
	if [[ " ${ACTIVE[*]} " == *" caddy "* ]]; then
		echo
		echo "Caddy (\`GOMAXPROCS=1 caddy run --config Caddyfile --adapter caddyfile\`; built with \`CGO_ENABLED=0 go install -trimpath -ldflags '-s -w' github.com/caddyserver/caddy/v2/cmd/caddy@$CADDY_VERSION\`):"
		echo
		echo '```'
		redact "$WORK/caddy/Caddyfile"
		echo '```'
	fi
	if [[ " ${ACTIVE[*]} " == *" traefik "* ]]; then
		echo
		echo "Traefik (\`GOMAXPROCS=1 traefik --configFile=traefik.yml\`, $TRAEFIK_VERSION; the load sends each path's cookie, \`${STICKY[traefik]}\` for u1..u4, path /k/n the (n mod 4)-th):"
		echo
		echo '```yaml'
		redact "$WORK/traefik/traefik.yml"
		echo "# dynamic.yml"
		redact "$WORK/traefik/dynamic.yml"
		echo '```'
	fi
	for t in "${H2ACTIVE[@]}"; do
		echo
		case $t in
		floor) echo "floor, HTTP/2 over TLS: \`GOMAXPROCS=1 floor -server std -listen 127.0.0.1:$H2_FLOOR_PORT -tls-cert tls.crt -tls-key tls.key$(floor_upstreams)\`" && continue ;;
		ringlb) echo "ringlb, HTTP/2 over TLS (\`ringlb serve -config ringlb-h2.yaml\`):" && echo && echo '```yaml' && redact "$WORK/ringlb-h2.yaml" ;;
		nginx) echo "nginx, HTTP/2 over TLS (\`nginx -p \$WORK/nginx-h2/ -c \$WORK/nginx-h2/nginx.conf\`):" && echo && echo '```nginx' && redact "$WORK/nginx-h2/nginx.conf" ;;
		haproxy) echo "HAProxy, HTTP/2 over TLS (\`haproxy -db -f haproxy-h2.cfg\`; the .pem is the certificate then its key):" && echo && echo '```' && redact "$WORK/haproxy-h2/haproxy.cfg" ;;
		esac
		echo '```'
	done
	if ((${#SKIP[@]} + ${#H2SKIP[@]})); then
		echo
		echo "## Skipped"
		echo
		for t in "${!SKIP[@]}"; do echo "- $t: ${SKIP[$t]}"; done
		for t in "${!H2SKIP[@]}"; do echo "- $t (HTTP/2 over TLS): ${H2SKIP[$t]}"; done
	fi
} >"$RESULTS"
log "wrote $RESULTS"
