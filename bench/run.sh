#!/usr/bin/env bash
# bench/run.sh: side-by-side benchmark of ringlb, nginx and HAProxy doing the
# same job (consistent hashing of the request URI over four upstreams, bounded
# loads where the proxy has them), plus wrk straight at one upstream as the
# ceiling. See bench/README.md for what it measures and how to read it.
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
#   TARGETS="direct floor ringlb nginx haproxy"  subset / order of targets;
#                     floor is bench/floor: net/http's server, ReverseProxy and
#                     ringlb's HTTP/1.1 transport with nothing else (what
#                     ringlb's parts cost before ringlb's own work); lean (not
#                     by default) is floor with a bare server loop in place of
#                     net/http's server, a measurement of what that server costs
#   SPREAD_N=200      distinct paths sent twice each in the stickiness check
#   BASE_PORT=19100   upstreams on BASE+1..4, lean BASE+78, floor BASE+79, ringlb BASE+80
#                     (admin +81), nginx BASE+82, haproxy BASE+83
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
#   H2_BASE_PORT=BASE_PORT+84   ringlb (admin +1), nginx +2, haproxy +3, with TLS
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
TARGETS=${TARGETS:-direct floor ringlb nginx haproxy}
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
export BENCH_PATHS

INVOCATION="DURATION=$DURATION ROUNDS=$ROUNDS WARMUP=$WARMUP PREWARM=$PREWARM CONNS=$CONNS BENCH_PATHS=$BENCH_PATHS TARGETS=\"$TARGETS\" bash bench/run.sh"
[[ $H2 == 0 ]] || INVOCATION="H2=$H2 H2_CLIENTS=$H2_CLIENTS H2_STREAMS=$H2_STREAMS $INVOCATION"
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
build() {
	(cd "$ROOT" && go build -o "$WORK/$1" "$2") >"$WORK/$1-build.log" 2>&1 && return 0
	echo "go build $2 failed: $(head -3 "$WORK/$1-build.log" | tr '\n' ' ')"
	return 1
}
HAVE_RINGLB=0 HAVE_FLOOR=0
RINGLB_SKIP=$(build ringlb ./cmd/ringlb) && HAVE_RINGLB=1
FLOOR_SKIP=$(build floor ./bench/floor) && HAVE_FLOOR=1

UPORTS=()
for i in 1 2 3 4; do UPORTS+=($((BASE_PORT + i))); done
LEAN_PORT=$((BASE_PORT + 78))
FLOOR_PORT=$((BASE_PORT + 79))
RINGLB_PORT=$((BASE_PORT + 80))
ADMIN_PORT=$((BASE_PORT + 81))
NGINX_PORT=$((BASE_PORT + 82))
HAPROXY_PORT=$((BASE_PORT + 83))
for p in "${UPORTS[@]}" "$LEAN_PORT" "$FLOOR_PORT" "$RINGLB_PORT" "$ADMIN_PORT" "$NGINX_PORT" "$HAPROXY_PORT"; do
	port_free "$p" || die "port $p is in use (set BASE_PORT)"
done
H2_RINGLB_PORT=$H2_BASE_PORT
H2_ADMIN_PORT=$((H2_BASE_PORT + 1))
H2_NGINX_PORT=$((H2_BASE_PORT + 2))
H2_HAPROXY_PORT=$((H2_BASE_PORT + 3))
if [[ $H2 != 0 ]]; then
	for p in "$H2_RINGLB_PORT" "$H2_ADMIN_PORT" "$H2_NGINX_PORT" "$H2_HAPROXY_PORT"; do
		port_free "$p" || die "port $p is in use (set H2_BASE_PORT)"
	done
fi

# ---------------------------------------------------------------- configs

mkdir -p "$WORK/nginx/tmp" "$WORK/haproxy"

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

# ---------------------------------------------------------------- start

UPIDS=()
for i in 1 2 3 4; do
	GOMAXPROCS=1 "${LOAD[@]}" "$WORK/upstream" -listen "127.0.0.1:${UPORTS[i - 1]}" -name "u$i" >"$WORK/u$i.log" 2>&1 &
	UPIDS+=($!)
	PIDS+=($!)
done
for i in 1 2 3 4; do
	wait_http "http://127.0.0.1:${UPORTS[i - 1]}/" "${UPIDS[i - 1]}" "upstream u$i" || die "upstream u$i did not start: $(cat "$WORK/u$i.log")"
done

declare -A URL=() PIDS_OF=() SKIP=() RSS=() SPREAD=() MED=()
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
	*) die "unknown target $t (direct floor lean ringlb nginx haproxy)" ;;
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
	echo "(cd bench && BENCH_PATHS=$BENCH_PATHS ${LOAD[*]} wrk -t1 -c$CONNS -d${2}s --latency -s paths.lua ${URL[$1]}/)"
}

# run_wrk SECONDS TARGET [wrk flags]: wrk in the background and `wait` for it,
# so that INT/TERM reach our trap at once rather than after the run.
run_wrk() {
	local secs=$1 t=$2
	shift 2
	(cd "$ROOT/bench" && exec "${LOAD[@]}" wrk -t1 -c"$CONNS" -d"${secs}s" "$@" -s paths.lua "${URL[$t]}/") &
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
	fticks=$(foreign_ticks "$before" "$after" $$ "${UPIDS[@]}" "${tp[@]}")
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
	[[ $t != direct ]] || opens=$((opens - CONNS - 1))
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

for r in $(seq 1 "$ROUNDS"); do
	for t in "${ACTIVE[@]}"; do
		sleep 1
		measure "$t" "$r" 1
		if ((NOISY)); then
			# too much foreign load: drop this run, repeat it once, keep the repeat either way
			awk -F'\t' -v OFS='\t' -v t="$t" -v r="$r" '$1 == t && $2 == r && $3 == 1 { $14 = 0; $15 = ($15 == "" ? "" : $15 "; ") "dropped: foreign load" } { print }' "$RUNS" >"$RUNS.tmp" && mv "$RUNS.tmp" "$RUNS"
			sleep 1
			measure "$t" "$r" 2
			if ((NOISY)); then
				awk -F'\t' -v OFS='\t' -v t="$t" -v r="$r" '$1 == t && $2 == r && $3 == 2 { $15 = ($15 == "" ? "" : $15 "; ") "noisy: foreign load again, kept" } { print }' "$RUNS" >"$RUNS.tmp" && mv "$RUNS.tmp" "$RUNS"
			fi
		fi
	done
done

# ---------------------------------------------------------------- peak RSS

for t in "${ACTIVE[@]}"; do
	read -r -a tp <<<"${PIDS_OF[$t]}"
	RSS[$t]=$(awk -v k="$(vmhwm_kib "${tp[@]}")" 'BEGIN { printf "%.1f", k / 1024 }')
done

# ---------------------------------------------------------------- spread / stickiness

# spread TARGET [BASE_URL CURL_FLAG...] -> one line: per-upstream counts,
# stickiness, errors, verdict. The base URL defaults to the target's.
spread() {
	local t=$1 base=${2:-${URL[$1]:-}} i pass
	shift $(($# < 2 ? $# : 2))
	local -a urls=()
	for i in $(seq 1 "$SPREAD_N"); do urls+=("$base/spread/$i"); done
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
	case $t in ringlb) port=$H2_RINGLB_PORT ;; nginx) port=$H2_NGINX_PORT ;; haproxy) port=$H2_HAPROXY_PORT ;; esac
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
	for o in nginx haproxy; do
		[[ -n ${H2MED[ringlb.cpu]:-} && -n ${H2MED[$o.cpu]:-} ]] || continue
		printf 'ringlb/%-8s CPU/req %s   p99 %s   RSS %s\n' "$o" \
			"$(ratio "${H2MED[ringlb.cpu]}" "${H2MED[$o.cpu]}")" "$(ratio "${H2MED[ringlb.p99]}" "${H2MED[$o.p99]}")" "$(ratio "${H2MED[ringlb.rss]}" "${H2MED[$o.rss]}")"
	done
}

if [[ $H2 != 0 ]]; then
	h2_configs
	for t in $TARGETS; do
		case $t in
		direct) continue ;; # the upstreams speak HTTP/1.1 only: no HTTP/2 ceiling
		ringlb | nginx | haproxy) h2_start "$t" ;;
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

col() { # target column -> "median min max" over used runs
	awk -F'\t' -v t="$1" -v c="$2" '$1 == t && $14 == 1 && $c != "-" && $5 > 0 { print $c }' "$RUNS" | stats
}
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
	local o p
	for p in ringlb floor lean; do
		for o in nginx haproxy; do
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
	echo "Upstreams: \`GOMAXPROCS=1 upstream -listen 127.0.0.1:PORT -name uN\` on ports ${UPORTS[*]} (bench/upstream)."
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
	for t in "${H2ACTIVE[@]}"; do
		echo
		case $t in
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
