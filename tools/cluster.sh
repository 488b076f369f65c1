#!/usr/bin/env bash
# tools/cluster.sh - N `q35 serve` replicas plus HAProxy on loopback, for a try-out and for
# tests/test_cluster.sh. The HAProxy configuration is deploy/haproxy.cfg with its server lines
# written for N replicas (r1..rN on ports BASE..BASE+N-1) and its bind address set.
#
#   tools/cluster.sh N [options] [-- q35 serve options...]   start, wait for Ctrl-C, stop
#   tools/cluster.sh N --detach [options]                      start, print the pids, return
#   tools/cluster.sh --stop DIR                                stop a detached cluster
#   tools/cluster.sh --config N [--port P] [--base-port B]     print the HAProxy config
#
# Options:
#   -m, --model FILE    the GGUF model (default: a tiny test model written into DIR)
#   --port P            HAProxy's port (default 8080)
#   --base-port B       the first replica's port (default 8081)
#   -t, --threads T     threads per replica (default 1)
#   --dir DIR           pid files, logs, the config (default: a new temporary folder)
#   --q35 PATH          the q35 binary (default: build/q35 next to this script)
#   --detach            return once every replica and HAProxy answer /health
# Each replica runs `q35 serve --replica-id rI --port B+I-1 --drain-seconds 3 -t T` plus the
# options after `--`. Ready when the balancer's /health answers 200; stdout gets one line
# "cluster: http://127.0.0.1:P replicas=N dir=DIR".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
template="$root/deploy/haproxy.cfg"

die() { echo "cluster.sh: $*" >&2; exit 2; }

# The HAProxy config for N replicas: the template's bind port and its server lines replaced.
gen_config() {
  local n=$1 port=$2 base=$3
  awk -v n="$n" -v port="$port" -v base="$base" '
    /^[ \t]+bind 127\.0\.0\.1:[0-9]+$/ { sub(/:[0-9]+$/, ":" port); print; next }
    /^[ \t]+server r[0-9]+ / {
      if (emitted[backend]++) next
      tracked = ($0 ~ / track /)
      for (i = 1; i <= n; i++) {
        line = "    server r" i " 127.0.0.1:" (base + i - 1)
        line = line (tracked ? " track q35_session/r" i : " check")
        print line
      }
      next
    }
    /^backend / { backend = $2 }
    { print }' "$template"
}

stop_dir() {
  local dir=$1 f pid
  for f in "$dir"/haproxy.pid "$dir"/r*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
  done
  for f in "$dir"/haproxy.pid "$dir"/r*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

wait_health() {
  local url=$1 pid=$2 what=$3 code
  for _ in $(seq 1 600); do
    code=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$url/health" || true)
    [ "$code" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || die "$what exited before it was healthy (see its log)"
    sleep 0.1
  done
  die "$what did not become healthy in 60 s"
}

n= model= port=8080 base=8081 threads=1 dir= detach=0 config_only=0 q35="$root/build/q35"
serve_extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --stop) [ $# -ge 2 ] || die "--stop needs DIR"; stop_dir "$2"; exit 0 ;;
    --config) config_only=1; [ $# -ge 2 ] || die "--config needs N"; n=$2; shift ;;
    -m|--model|--model_path|--model-path) model=$2; shift ;;
    --port) port=$2; shift ;;
    --base-port|--base_port) base=$2; shift ;;
    -t|--threads) threads=$2; shift ;;
    --dir) dir=$2; shift ;;
    --q35) q35=$2; shift ;;
    --detach) detach=1 ;;
    --) shift; serve_extra=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$n" ] || die "unexpected argument '$1'"; n=$1 ;;
  esac
  shift
done
[[ "$n" =~ ^[1-9][0-9]?$ ]] || die "give the replica count N (1-99)"
[[ "$port" =~ ^[0-9]+$ && "$base" =~ ^[0-9]+$ ]] || die "ports must be numbers"
if [ $config_only = 1 ]; then gen_config "$n" "$port" "$base"; exit 0; fi
command -v haproxy >/dev/null || die "haproxy is not installed (apt-get install haproxy)"
[ -x "$q35" ] || die "no q35 binary at $q35 (build first, or give --q35)"
[ -n "$dir" ] || dir=$(mktemp -d /tmp/q35-cluster.XXXXXX)
mkdir -p "$dir"
if [ -z "$model" ]; then
  model="$dir/tiny.gguf"
  [ -f "$model" ] || "$q35" export --tiny-test -o "$model" >/dev/null 2>"$dir/export.log"
fi
[ -f "$model" ] || die "no model file $model"

gen_config "$n" "$port" "$base" >"$dir/haproxy.cfg"
haproxy -c -q -f "$dir/haproxy.cfg" || die "haproxy rejects $dir/haproxy.cfg"
for i in $(seq 1 "$n"); do
  "$q35" serve -m "$model" --host 127.0.0.1 --port $((base + i - 1)) --replica-id "r$i" \
    --drain-seconds 3 -t "$threads" ${serve_extra[@]+"${serve_extra[@]}"} >"$dir/r$i.log" 2>&1 &
  echo $! >"$dir/r$i.pid"
done
haproxy -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
echo $! >"$dir/haproxy.pid"
for i in $(seq 1 "$n"); do
  wait_health "http://127.0.0.1:$((base + i - 1))" "$(cat "$dir/r$i.pid")" "replica r$i"
done
wait_health "http://127.0.0.1:$port" "$(cat "$dir/haproxy.pid")" "haproxy"
echo "cluster: http://127.0.0.1:$port replicas=$n dir=$dir"
if [ $detach = 1 ]; then exit 0; fi
trap 'stop_dir "$dir"; exit 0' INT TERM
echo "cluster.sh: Ctrl-C stops the replicas and HAProxy" >&2
while kill -0 "$(cat "$dir/haproxy.pid")" 2>/dev/null; do sleep 1; done
stop_dir "$dir"
