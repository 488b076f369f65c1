#!/usr/bin/env bash
# test_server_limits.sh - limits that protect the host (issue 8):
#  1. memory budget: q35 run and q35 serve refuse, before allocating, a session whose KV cache +
#     recurrent state exceeds --mem-budget; the byte count is checked against the formula
#     evaluated from the GGUF metadata by an independent parser (tests/tools/hf_gguf_info.py):
#     budget = need runs, need - 1 is refused with a message naming the numbers and flags.
#     A server whose budget holds one session serves anonymous and named requests one after
#     the other (idle sessions freed to make room) and concurrent ones (one waits), and never
#     holds more session bytes than the budget.
#  2. idle-session eviction: with --session-idle-timeout 2 a named session is reused at once
#     (cached_tokens > 0) and forgotten after the timeout (metrics counter, cached_tokens 0).
#  3. --timeout: a client that sends headers and half a body and stalls is disconnected within
#     a generous bound; a non-streamed request computing longer than the timeout gets its
#     answer; a stream whose first token comes later than the timeout is not cut.
# No timing assertions except "disconnected within a generous bound".
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; [ -f "$tmp/server.log" ] && tail -n 20 "$tmp/server.log"; exit 1; }

"$Q35" export --tiny-test -o "$tmp/tiny.gguf" >/dev/null 2>&1

# --- the bytes a session needs, from the metadata (independent of q35) ---
need_bytes() { # CTX KV_BYTES_PER_ELEMENT
  python3 "$Q35_SRC/tests/tools/hf_gguf_info.py" "$tmp/tiny.gguf" | python3 -c '
import json, sys
kv = json.load(sys.stdin)["kv"]; a = kv["general.architecture"]; g = lambda k, d=None: kv.get(a + "." + k, d)
ctx, esz = int(sys.argv[1]), float(sys.argv[2])
L = g("block_count") - g("nextn_predict_layers", 0); iv = g("full_attention_interval", 4)
n_attn = sum(1 for i in range(L) if (i + 1) % iv == 0); n_gdn = L - n_attn
row = int(g("attention.head_count_kv") * g("attention.key_length") * esz)
ds, C = g("ssm.state_size"), 2 * g("ssm.group_count") * g("ssm.state_size") + g("ssm.inner_size")
rec = n_gdn * 4 * ((g("ssm.conv_kernel") - 1) * C + g("ssm.time_step_rank") * ds * ds)
print(2 * row * ctx * n_attn + rec)' "$1" "$2"
}
CTX_BIG=262144
need=$(need_bytes $CTX_BIG 2)
set +e
out=$("$Q35" run -m "$tmp/tiny.gguf" --tokens 1,2,3 -n 2 --print-ids --temperature 0 --ctx $CTX_BIG \
  --mem-budget $((need - 1)) 2>"$tmp/err"); rc=$?
set -e
[ $rc = 1 ] || fail "run with --mem-budget need-1 ($((need - 1))): exit $rc, want 1"
[ -z "$out" ] || fail "run refused by the budget printed on stdout: $out"
grep -q -- "--ctx $CTX_BIG" "$tmp/err" && grep -q -- "--mem-budget" "$tmp/err" && grep -q "MiB" "$tmp/err" ||
  fail "the budget refusal does not name the numbers and flags: $(cat "$tmp/err")"
echo "ok   run refused at need-1 bytes: $(tail -n1 "$tmp/err")"
out=$("$Q35" run -m "$tmp/tiny.gguf" --tokens 1,2,3 -n 2 --print-ids --temperature 0 --ctx $CTX_BIG \
  --mem_budget $need --no-stats 2>"$tmp/err") || fail "run with --mem-budget = need ($need) failed: $(cat "$tmp/err")"
[ "$(echo "$out" | wc -w)" = 2 ] || fail "run at the budget printed '$out'"
echo "ok   run at exactly $need bytes (the formula's count) generates"
# q8_0 KV: 34 bytes per 32 elements
need8=$(need_bytes $CTX_BIG 1.0625)
set +e
"$Q35" run -m "$tmp/tiny.gguf" --tokens 1,2,3 -n 1 --print-ids --ctx $CTX_BIG --kv q8_0 --mem-budget $((need8 - 1)) \
  >/dev/null 2>&1; rc=$?
set -e
[ $rc = 1 ] || fail "q8_0 KV at need-1 bytes: exit $rc, want 1"
"$Q35" run -m "$tmp/tiny.gguf" --tokens 1,2,3 -n 1 --print-ids --ctx $CTX_BIG --kv q8_0 --mem-budget $need8 \
  --no-stats >/dev/null 2>&1 || fail "q8_0 KV at exactly $need8 bytes refused"
echo "ok   q8_0 KV cache counted exactly ($need8 bytes)"
for bad in 12Q -1 "" 1.5X G; do
  set +e
  "$Q35" run -m "$tmp/tiny.gguf" --tokens 1 -n 1 --mem-budget "$bad" >/dev/null 2>"$tmp/err"; rc=$?
  set -e
  [ $rc = 2 ] && grep -q -- "--mem-budget" "$tmp/err" || fail "--mem-budget '$bad': exit $rc, $(cat "$tmp/err")"
done
for good in 4G 512M 1.5GiB 100000000 0 off; do
  "$Q35" run -m "$tmp/tiny.gguf" --tokens 1 -n 1 --print-ids --ctx 64 --mem-budget "$good" --no-stats >/dev/null 2>&1 ||
    fail "--mem-budget '$good' refused"
done
echo "ok   --mem-budget sizes parsed (bad ones exit 2)"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
start_server() { # extra serve flags...
  port=$(free_port)
  "$Q35" serve -m "$tmp/tiny.gguf" --host 127.0.0.1 --port "$port" -t 2 --no-think "$@" >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$code" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  fail "the server did not become healthy"
}
stop_server() {
  local src=0
  kill -TERM "$pid"; wait "$pid" || src=$?; pid=
  [ $src = 0 ] || fail "server exit status $src after SIGTERM"
  if grep -q -E "ERROR: (Address|Leak)Sanitizer|runtime error" "$tmp/server.log"; then fail "sanitizer report"; fi
}
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v k="q35_$1" '$1 == k {print $2}'; }

# --- serve: a budget below one session refuses to start ---
CTX=1024
need1=$(need_bytes $CTX 2)
set +e
"$Q35" serve -m "$tmp/tiny.gguf" --port "$(free_port)" --ctx $CTX --mem-budget $((need1 - 1)) >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ $rc = 1 ] && grep -q -- "--mem-budget" "$tmp/err" || fail "serve with a budget below one session: exit $rc, $(cat "$tmp/err")"
echo "ok   serve refuses a budget below one session: $(grep -m1 -- --mem-budget "$tmp/err")"

# --- serve: a budget for one session (+ a little), two slots and named sessions ---
start_server --ctx $CTX --parallel 2 --max-sessions 2 --mem-budget $((need1 + need1 / 2)) --snap-every 16
[ "$(metric session_need_bytes)" = "$need1" ] || fail "session_need_bytes $(metric session_need_bytes), want $need1"
python3 - "$port" "$((need1 + need1 / 2))" <<'EOF' || fail "budget requests"
import json, sys, threading, urllib.request
port, budget = int(sys.argv[1]), int(sys.argv[2])
def post(body, sid=None):
    h = {"Content-Type": "application/json"}
    if sid: h["session_id"] = sid
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                               json.dumps(body).encode(), h), timeout=120)
    return json.load(r)
def metric(k):
    t = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return float([l.split()[1] for l in t.splitlines() if l.startswith("q35_" + k + " ")][0])
P = [5 + i % 900 for i in range(100)]
a = post({"prompt": P, "max_tokens": 4, "temperature": 0})
assert metric("session_bytes") <= budget, "over budget"
b = post({"prompt": P[:50], "max_tokens": 4, "temperature": 0}, sid="s1")   # needs a 2nd session: frees the idle one
assert metric("session_bytes") <= budget, "over budget"
assert metric("session_memory_evictions_total") >= 1, "no idle session was freed to make room"
res = [None] * 4
def go(i):
    try: res[i] = post({"prompt": P[i:], "max_tokens": 8, "temperature": 0, "seed": i})
    except Exception as e: res[i] = e
ts = [threading.Thread(target=go, args=(i,)) for i in range(4)]
for t in ts: t.start()
peak = 0
while any(t.is_alive() for t in ts):
    peak = max(peak, metric("session_bytes"))
for t in ts: t.join()
for i, r in enumerate(res):
    assert isinstance(r, dict) and r["usage"]["completion_tokens"] >= 1, f"concurrent request {i}: {r}"
assert peak <= budget, f"session bytes {peak} passed the budget {budget}"
solo = post({"prompt": P[2:], "max_tokens": 8, "temperature": 0, "seed": 2})
assert solo["choices"][0]["text"] == res[2]["choices"][0]["text"], "a request that waited for memory differs from solo"
print(f"ok   budget of {budget} bytes (1.5 sessions): anon + named + 4 concurrent answered, peak session bytes {int(peak)}, "
      f"{int(metric('session_memory_evictions_total'))} idle sessions freed for room, {int(metric('snapshots_skipped_total'))} snapshots skipped")
EOF
stop_server

# --- idle eviction and --timeout ---
start_server --ctx 8192 --parallel 1 --chunk 1 --snap-every 16 --session-idle-timeout 2 --timeout 1
python3 - "$port" <<'EOF' || fail "idle eviction / timeouts"
import json, socket, sys, threading, time, urllib.request
port = int(sys.argv[1])
URL = f"http://127.0.0.1:{port}"
def post(body, sid=None, path="/v1/completions"):
    h = {"Content-Type": "application/json"}
    if sid: h["session_id"] = sid
    return urllib.request.urlopen(urllib.request.Request(URL + path, json.dumps(body).encode(), h), timeout=300)
def metric(k):
    t = urllib.request.urlopen(URL + "/metrics", timeout=30).read().decode()
    return float([l.split()[1] for l in t.splitlines() if l.startswith("q35_" + k + " ")][0])
P = [5 + i % 900 for i in range(40)]
# idle eviction: reused at once, forgotten after the timeout
r1 = json.load(post({"prompt": P, "max_tokens": 2, "temperature": 0}, sid="idle"))
r2 = json.load(post({"prompt": P + [7, 8], "max_tokens": 2, "temperature": 0}, sid="idle"))
assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, f"no reuse right away: {r2['usage']}"
ev0 = metric("session_idle_evictions_total")
deadline = time.time() + 60
while metric("session_idle_evictions_total") <= ev0 or metric("sessions_named") > 0:
    assert time.time() < deadline, "the idle session was not evicted within 60 s"
    time.sleep(0.5)
r3 = json.load(post({"prompt": P + [7, 8], "max_tokens": 2, "temperature": 0}, sid="idle"))
assert r3["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"evicted session still reused: {r3['usage']}"
assert r3["choices"][0]["text"] == r2["choices"][0]["text"], "output after eviction differs"
print(f"ok   idle session evicted after --session-idle-timeout 2 (cached_tokens {r2['usage']['prompt_tokens_details']['cached_tokens']} -> 0)")
# a stalled sender is dropped
s = socket.create_connection(("127.0.0.1", port), timeout=120)
body = json.dumps({"prompt": P, "max_tokens": 2}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
          + body[: len(body) // 2])
t0 = time.time()
try:
    got = s.recv(4096)
except (ConnectionResetError, socket.timeout) as e:
    got = repr(e).encode()
dt = time.time() - t0
assert dt < 60, f"a stalled sender was not dropped within 60 s ({dt:.1f} s)"
assert not got.startswith(b"HTTP/1.1 200"), f"a half request was answered: {got[:80]}"
s.close()
print(f"ok   a client sending half a body and stalling was dropped after {dt:.1f} s (--timeout 1)")
# a long non-streamed computation (queued behind another, then a 1-token-per-step prefill) and a
# stream whose first token comes late are both longer than the timeout and still answered in full
LONG = [5 + i % 900 for i in range(1500)]
out = {}
def long_plain():
    t0 = time.time(); out["plain"] = json.load(post({"prompt": LONG, "max_tokens": 1, "temperature": 0})); out["tp"] = time.time() - t0
def late_stream():
    time.sleep(0.2)
    t0 = time.time()
    r = post({"prompt": LONG[1:], "max_tokens": 3, "temperature": 0, "stream": True})
    out["stream"] = r.read().decode(); out["ts"] = time.time() - t0
ts = [threading.Thread(target=long_plain), threading.Thread(target=late_stream)]
for t in ts: t.start()
for t in ts: t.join()
assert out["plain"]["usage"]["completion_tokens"] == 1, out["plain"]
assert out["stream"].rstrip().endswith("data: [DONE]"), f"stream cut: {out['stream'][-200:]}"
print(f"ok   non-streamed request computing {out['tp']:.1f} s and a stream waiting {out['ts']:.1f} s for its tokens "
      f"(--timeout 1) both answered in full")
if out["tp"] < 2 or out["ts"] < 2:
    print("note the computations were shorter than 2 s on this machine: the timeout premise is weak this run")
assert urllib.request.urlopen(URL + "/health", timeout=30).status == 200
EOF
stop_server
echo "PASS"
