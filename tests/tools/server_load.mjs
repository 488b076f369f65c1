// server_load.mjs - load and fault test of a running `q35 serve` (driven by tests/test_server_load.sh).
// Env: Q35_URL (http://127.0.0.1:PORT, loopback only), Q35_PID (the server's pid, for /proc/PID/status),
// Q35_MODEL_ID, Q35_CTX, Q35_MAX_BODY, Q35_CLIENTS, Q35_ROUND_S (seconds of load per round),
// Q35_REQ_TIMEOUT_S, Q35_RSS_MARGIN_PCT, Q35_RSS_MARGIN_MB.
// Two identical rounds of CLIENTS concurrent clients, each running a deterministic mix of
// requests for ROUND_S seconds: seeded (compared with the same request sent alone before the load),
// unseeded (shape only), streamed and plain, chat and completions, short and long prompts, named
// sessions, slow readers, clients that disconnect mid-stream, malformed / wrongly typed /
// out-of-range / oversized requests (each must get a 4xx with a JSON error). Peak RSS (VmHWM) after
// round 2 must not exceed the one after round 1 by more than the margin. Exit 0 = every check passed.
import fs from 'node:fs';

const base = process.env.Q35_URL;
if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(base || '')) {
  console.error(`server_load: Q35_URL must be a loopback URL, got ${base}`);
  process.exit(2);
}
const pid = Number(process.env.Q35_PID);
const modelId = process.env.Q35_MODEL_ID;
const ctx = Number(process.env.Q35_CTX);
const maxBody = Number(process.env.Q35_MAX_BODY);
const nClients = Number(process.env.Q35_CLIENTS || 40);
const roundMs = 1000 * Number(process.env.Q35_ROUND_S || 15);
const reqTimeoutMs = 1000 * Number(process.env.Q35_REQ_TIMEOUT_S || 60);
const marginPct = Number(process.env.Q35_RSS_MARGIN_PCT || 10);
const marginMB = Number(process.env.Q35_RSS_MARGIN_MB || 20);
const maxItersPerClient = 10000; // a bound on each client's loop besides the deadline

let failures = 0;
const failNotes = new Map(); // failure kind -> count (print the first few in full)
function fail(kind, detail) {
  failures++;
  const n = (failNotes.get(kind) || 0) + 1;
  failNotes.set(kind, n);
  if (n <= 3) console.error(`FAIL: ${kind}${detail !== undefined ? ' ' + JSON.stringify(detail).slice(0, 400) : ''}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// deterministic PRNG (mulberry32) so both rounds send the same mix
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function readProcStatus() {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number((s.match(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm')) || [0, 0])[1]);
  return { hwm: kb('VmHWM'), rss: kb('VmRSS') };
}

// ---- request plumbing ----------------------------------------------------------------------
// Every request runs under a timeout; a timeout is a hang and fails the test.
class Hang extends Error {}
async function withTimeout(fn, what) {
  const ac = new AbortController();
  let timedOut = false;
  const t = setTimeout(() => { timedOut = true; ac.abort(); }, reqTimeoutMs);
  try {
    return await fn(ac.signal);
  } catch (e) {
    if (timedOut) throw new Hang(`${what}: no answer within ${reqTimeoutMs} ms`);
    throw e;
  } finally {
    clearTimeout(t);
  }
}

function endpoint(chat) { return chat ? '/v1/chat/completions' : '/v1/completions'; }

// a plain (non-streamed) request; returns { status, json, text }
async function post(path, body, headers = {}, signal) {
  const r = await fetch(base + path, {
    method: 'POST', body, signal, headers: { 'content-type': 'application/json', ...headers },
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

// reads an SSE stream; delayMs > 0 makes a slow reader. Returns { status, text, finish, chunks, done, usage }
async function postStream(path, body, headers, signal, chat, delayMs = 0, abortAfter = 0, ac = null) {
  const r = await fetch(base + path, {
    method: 'POST', body: JSON.stringify(body), signal, headers: { 'content-type': 'application/json', ...headers },
  });
  if (r.status !== 200) return { status: r.status, text: await r.text() };
  const out = { status: 200, text: '', finish: null, chunks: 0, done: false, usage: null, bad: null };
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') { out.done = true; continue; }
        let j;
        try { j = JSON.parse(data); } catch { out.bad = `unparsable event ${data.slice(0, 100)}`; continue; }
        out.chunks++;
        if (j.error) { out.bad = `error event ${data.slice(0, 200)}`; continue; }
        if (j.object !== (chat ? 'chat.completion.chunk' : 'text_completion')) out.bad = `chunk object ${j.object}`;
        if (j.usage) out.usage = j.usage;
        for (const c of j.choices || []) {
          if (chat) out.text += (c.delta && (c.delta.reasoning_content || '')) + '\u0001' + ((c.delta && c.delta.content) || '');
          else out.text += c.text || '';
          if (c.finish_reason) out.finish = c.finish_reason;
        }
      }
    }
    if (abortAfter && out.chunks >= abortAfter) {
      ac.abort();
      out.aborted = true;
      return out;
    }
    if (delayMs) await sleep(delayMs);
  }
  return out;
}
// chat stream text: join reasoning and content separately (\u0001 separated pieces above)
function streamChatText(t) {
  let reasoning = '', content = '';
  for (const piece of t.split(/(?=\u0001)/)) {
    if (piece.startsWith('\u0001')) content += piece.slice(1);
    else reasoning += piece;
  }
  return JSON.stringify([reasoning.trim(), content.trim()]);
}
function plainText(chat, json) {
  const c = json.choices[0];
  return chat ? JSON.stringify([(c.message.reasoning_content || '').trim(), (c.message.content || '').trim()]) : c.text;
}
function checkPlainShape(chat, r, maxTokens) {
  const j = r.json;
  if (!j || !Array.isArray(j.choices) || j.choices.length !== 1) return `no choices: ${r.text.slice(0, 200)}`;
  if (j.object !== (chat ? 'chat.completion' : 'text_completion')) return `object ${j.object}`;
  const c = j.choices[0];
  if (chat && !(c.message && c.message.role === 'assistant')) return 'no assistant message';
  if (!chat && typeof c.text !== 'string') return 'no text';
  if (c.finish_reason !== 'stop' && c.finish_reason !== 'length') return `finish_reason ${c.finish_reason}`;
  const u = j.usage;
  if (!u || u.total_tokens !== u.prompt_tokens + u.completion_tokens || u.completion_tokens > maxTokens ||
      u.prompt_tokens < 1) return `usage ${JSON.stringify(u)}`;
  if (c.finish_reason === 'length' && u.completion_tokens !== maxTokens &&
      u.prompt_tokens + u.completion_tokens !== ctx) return `length with ${u.completion_tokens} tokens`;
  if (!Number.isInteger(j.seed)) return 'no seed';
  return null;
}
function checkStreamShape(r) {
  if (r.bad) return r.bad;
  if (!r.done) return 'stream did not end with [DONE]';
  if (r.finish !== 'stop' && r.finish !== 'length') return `finish_reason ${r.finish}`;
  if (r.chunks < 1) return 'no chunks';
  return null;
}

// ---- the request mix -------------------------------------------------------------------------
const words = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex blue jars of milk'.split(' ');
function promptText(r, long) {
  const n = long ? 40 + Math.floor(r() * 80) : 2 + Math.floor(r() * 10); // about 3 tokens a word here
  const w = [];
  for (let i = 0; i < n; i++) w.push(words[Math.floor(r() * words.length)]);
  return w.join(' ');
}
function makeBody(chat, text, extra) {
  return chat ? { model: modelId, messages: [{ role: 'user', content: text }], ...extra }
    : { model: modelId, prompt: text, ...extra };
}

// seeded templates: each is sent alone first (the reference), then many times under load
const N_TEMPLATES = 16;
const templates = [];
{
  const r = rng(12345);
  for (let i = 0; i < N_TEMPLATES; i++) {
    const chat = i % 2 === 0, stream = (i >> 1) % 2 === 1, long = (i >> 2) % 2 === 1, session = i >= 12;
    const maxTokens = 8 + Math.floor(r() * 24);
    const body = makeBody(chat, promptText(r, long), {
      max_tokens: maxTokens, seed: 1000 + i, temperature: 0.5 + r(), top_k: 40, stream,
    });
    templates.push({ i, chat, stream, long, session, maxTokens, body, ref: null });
  }
}

// invalid requests: [what, method, path, body-or-thunk, expected status (or 0 for any 4xx)]
const okChat = { model: modelId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
const invalid = [
  ['malformed JSON', '/v1/chat/completions', '{"messages": [', 400],
  ['truncated JSON string', '/v1/completions', '{"prompt": "abc', 400],
  ['non-object body', '/v1/completions', '[1, 2]', 400],
  ['empty body', '/v1/chat/completions', '', 400],
  ['messages not an array', '/v1/chat/completions', JSON.stringify({ ...okChat, messages: 'hello' }), 400],
  ['temperature wrong type', '/v1/chat/completions', JSON.stringify({ ...okChat, temperature: 'hot' }), 400],
  ['stream wrong type', '/v1/chat/completions', JSON.stringify({ ...okChat, stream: 'yes' }), 400],
  ['max_tokens wrong type', '/v1/chat/completions', JSON.stringify({ ...okChat, max_tokens: '5' }), 400],
  ['prompt wrong type', '/v1/completions', JSON.stringify({ model: modelId, prompt: { a: 1 }, max_tokens: 2 }), 400],
  ['temperature out of range', '/v1/chat/completions', JSON.stringify({ ...okChat, temperature: 2.5 }), 400],
  ['top_p 0', '/v1/chat/completions', JSON.stringify({ ...okChat, top_p: 0 }), 400],
  ['n 0', '/v1/chat/completions', JSON.stringify({ ...okChat, n: 0 }), 400],
  ['max_tokens 0', '/v1/chat/completions', JSON.stringify({ ...okChat, max_tokens: 0 }), 400],
  ['seed -1', '/v1/chat/completions', JSON.stringify({ ...okChat, seed: -1 }), 400],
  ['presence_penalty 3', '/v1/chat/completions', JSON.stringify({ ...okChat, presence_penalty: 3 }), 400],
  ['token id out of range', '/v1/completions', JSON.stringify({ model: modelId, prompt: [1, 2, 99999999] }), 400],
  ['prompt longer than the context', '/v1/completions',
    JSON.stringify({ model: modelId, prompt: 'lorem ipsum '.repeat(ctx), max_tokens: 2 }), 400],
  ['unknown model', '/v1/chat/completions', JSON.stringify({ ...okChat, model: 'gpt-17' }), 400],
  ['oversized body', '/v1/completions', () => JSON.stringify({ model: modelId, prompt: bigText }), 413],
  ['oversized body, chunked', '/v1/completions', 'chunked', 413],
  ['unknown endpoint', '/v1/nothing-here', '{}', 404],
];
const bigText = 'x'.repeat(maxBody + 100);

async function sendInvalid(inv, signal) {
  const [, path, body] = inv;
  if (body === 'chunked') {
    // a body with no Content-Length, sent in pieces, that grows past --max-body
    const piece = new TextEncoder().encode('y'.repeat(8192));
    let sent = 0;
    const stream = new ReadableStream({
      pull(c) {
        if (sent > maxBody + 16384) { c.close(); return; }
        sent += piece.length;
        c.enqueue(piece);
      },
    });
    const r = await fetch(base + path, {
      method: 'POST', body: stream, duplex: 'half', signal, headers: { 'content-type': 'application/json' },
    });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, json, text };
  }
  return post(path, typeof body === 'function' ? body() : body, {}, signal);
}

// ---- counters --------------------------------------------------------------------------------
function newStats() {
  return { requests: 0, ok: 0, seededCompared: 0, sessionCompared: 0, slowReads: 0, unseeded: 0, aborted: 0,
    invalid: 0, rejected429: 0, errors: 0, hangs: 0, connErrors: 0 };
}

async function runSeeded(st, t, r, client, iter, round, signal) {
  const headers = t.session ? { session_id: `load-r${round}-c${client}-i${iter}` } : {};
  const slow = t.stream && r() < 0.4;
  let text;
  if (t.stream) {
    const res = await postStream(endpoint(t.chat), t.body, headers, signal, t.chat, slow ? 30 : 0);
    if (res.status === 429) { st.rejected429++; return; }
    if (res.status !== 200) { st.errors++; return fail('seeded stream status', [res.status, res.text]); }
    const bad = checkStreamShape(res);
    if (bad) { st.errors++; return fail('seeded stream shape', [t.i, bad]); }
    text = t.chat ? streamChatText(res.text) : res.text;
    if (slow) st.slowReads++;
  } else {
    const res = await post(endpoint(t.chat), JSON.stringify(t.body), headers, signal);
    if (res.status === 429) { st.rejected429++; return; }
    if (res.status !== 200) { st.errors++; return fail('seeded status', [res.status, res.text]); }
    const bad = checkPlainShape(t.chat, res, t.maxTokens);
    if (bad) { st.errors++; return fail('seeded shape', [t.i, bad]); }
    text = plainText(t.chat, res.json);
  }
  if (text !== t.ref) { st.errors++; return fail('seeded request under load differs from its solo run', [t.i, text, t.ref]); }
  st.ok++;
  st.seededCompared++;
  if (t.session) st.sessionCompared++;
}

async function runUnseeded(st, r, signal) {
  const chat = r() < 0.5, stream = r() < 0.5, long = r() < 0.3;
  const maxTokens = 4 + Math.floor(r() * 28);
  const body = makeBody(chat, promptText(r, long), { max_tokens: maxTokens, temperature: r() * 1.5, stream });
  st.unseeded++;
  if (stream) {
    const res = await postStream(endpoint(chat), body, {}, signal, chat);
    if (res.status === 429) { st.rejected429++; return; }
    if (res.status !== 200) { st.errors++; return fail('unseeded stream status', [res.status, res.text]); }
    const bad = checkStreamShape(res);
    if (bad) { st.errors++; return fail('unseeded stream shape', bad); }
  } else {
    const res = await post(endpoint(chat), JSON.stringify(body), {}, signal);
    if (res.status === 429) { st.rejected429++; return; }
    if (res.status !== 200) { st.errors++; return fail('unseeded status', [res.status, res.text]); }
    const bad = checkPlainShape(chat, res, maxTokens);
    if (bad) { st.errors++; return fail('unseeded shape', bad); }
  }
  st.ok++;
}

async function runAbort(st, r, signal) {
  // a long stream the client drops after a few chunks (or before the first one)
  const chat = r() < 0.5;
  const body = makeBody(chat, promptText(r, r() < 0.3), { max_tokens: 200, temperature: 1, stream: true });
  const ac = new AbortController();
  const onOuter = () => ac.abort();
  signal.addEventListener('abort', onOuter);
  const early = r() < 0.25;
  let timer = null;
  if (early) timer = setTimeout(() => ac.abort(), Math.floor(r() * 20));
  try {
    const res = await postStream(endpoint(chat), body, {}, ac.signal, chat, 0, 1 + Math.floor(r() * 4), ac);
    if (res.status === 429) { st.rejected429++; return; }
    if (res.status !== 200) { st.errors++; return fail('abort stream status', [res.status, res.text]); }
    if (res.bad) { st.errors++; return fail('abort stream shape', res.bad); }
  } catch (e) {
    if (signal.aborted) throw e; // the outer timeout: a hang
    if (!(e && e.name === 'AbortError')) throw e;
  } finally {
    if (timer) clearTimeout(timer);
    signal.removeEventListener('abort', onOuter);
  }
  st.aborted++;
}

async function runInvalid(st, r, signal) {
  const inv = invalid[Math.floor(r() * invalid.length)];
  const [what, , , want] = inv;
  st.invalid++;
  let res;
  try {
    res = await sendInvalid(inv, signal);
  } catch (e) {
    if (signal.aborted) throw e;
    // the server may answer 413 and close before the whole oversized body is sent
    if (want === 413 && /ECONNRESET|EPIPE|other side closed|SocketError/i.test(String(e && (e.cause || e)))) {
      st.connErrors++;
      return;
    }
    throw e;
  }
  if (res.status < 400 || res.status > 499 || (want && res.status !== want)) {
    st.errors++;
    return fail(`invalid request '${what}' answered ${res.status}, want ${want || '4xx'}`, res.text.slice(0, 200));
  }
  if (!(res.json && res.json.error && typeof res.json.error.message === 'string')) {
    st.errors++;
    return fail(`invalid request '${what}': no JSON error body`, res.text.slice(0, 200));
  }
  st.ok++;
}

async function client(st, idx, round, deadline) {
  const r = rng(7919 * (idx + 1));
  for (let iter = 0; iter < maxItersPerClient && Date.now() < deadline; iter++) {
    const x = r();
    st.requests++;
    try {
      await withTimeout(async (signal) => {
        if (x < 0.40) await runSeeded(st, templates[Math.floor(r() * templates.length)], r, idx, iter, round, signal);
        else if (x < 0.60) await runUnseeded(st, r, signal);
        else if (x < 0.72) await runAbort(st, r, signal);
        else await runInvalid(st, r, signal);
      }, `client ${idx} request ${iter}`);
    } catch (e) {
      st.errors++;
      if (e instanceof Hang) {
        st.hangs++;
        fail('hang', e.message);
      } else {
        fail('request threw', String(e && e.stack ? e.stack : e) + ' cause ' + String(e && e.cause));
      }
    }
  }
}

async function metrics() {
  const r = await withTimeout((signal) => fetch(base + '/metrics', { signal }).then((x) => x.text()), 'metrics');
  const m = {};
  for (const line of r.split('\n')) {
    const k = line.match(/^(q35_\w+) ([0-9.eE+-]+)$/);
    if (k) m[k[1]] = Number(k[2]);
  }
  return m;
}

async function round(n) {
  const st = newStats();
  const t0 = Date.now();
  const deadline = t0 + roundMs;
  await Promise.all(Array.from({ length: nClients }, (_, i) => client(st, i, n, deadline)));
  const secs = (Date.now() - t0) / 1000;
  // the server drains: no request is left active or queued (bounded wait)
  let m = await metrics();
  for (let k = 0; k < 100 && (m.q35_requests_active || m.q35_requests_queued); k++) {
    await sleep(100);
    m = await metrics();
  }
  if (m.q35_requests_active || m.q35_requests_queued) {
    fail('requests left active or queued after the round', [m.q35_requests_active, m.q35_requests_queued]);
  }
  const h = await withTimeout((signal) => fetch(base + '/health', { signal }), 'health');
  if (h.status !== 200) fail('health after the round', h.status);
  const mem = readProcStatus();
  console.log(`round ${n}: clients ${nClients}, requests ${st.requests}, duration ${secs.toFixed(1)} s, ` +
    `ok ${st.ok}, seeded compared ${st.seededCompared} (sessions ${st.sessionCompared}, slow readers ` +
    `${st.slowReads}), unseeded ${st.unseeded}, aborted mid-stream ${st.aborted}, invalid ${st.invalid} ` +
    `(connection closed on oversized ${st.connErrors}), 429 ${st.rejected429}, errors ${st.errors}, ` +
    `hangs ${st.hangs}; VmHWM ${(mem.hwm / 1024).toFixed(1)} MB, VmRSS ${(mem.rss / 1024).toFixed(1)} MB`);
  return { st, mem, secs };
}

// ---- main ------------------------------------------------------------------------------------
const mem0 = readProcStatus();
// the solo references: each seeded template sent alone, before any load
for (const t of templates) {
  const headers = t.session ? { session_id: `solo-${t.i}` } : {};
  if (t.stream) {
    const res = await withTimeout((s) => postStream(endpoint(t.chat), t.body, headers, s, t.chat), 'solo');
    const bad = res.status !== 200 ? `status ${res.status} ${res.text}` : checkStreamShape(res);
    if (bad) fail('solo reference', [t.i, bad]);
    t.ref = t.chat ? streamChatText(res.text || '') : res.text;
  } else {
    const res = await withTimeout((s) => post(endpoint(t.chat), JSON.stringify(t.body), headers, s), 'solo');
    const bad = res.status !== 200 ? `status ${res.status} ${res.text}` : checkPlainShape(t.chat, res, t.maxTokens);
    if (bad) fail('solo reference', [t.i, bad]);
    else t.ref = plainText(t.chat, res.json);
  }
}
// the references must differ from one another (distinct seeds and prompts), or the bleed check is blind
if (new Set(templates.map((t) => t.ref)).size < templates.length - 2) {
  fail('solo references are not distinct', templates.map((t) => t.ref));
}
console.log(`before load: VmHWM ${(mem0.hwm / 1024).toFixed(1)} MB, VmRSS ${(mem0.rss / 1024).toFixed(1)} MB; ` +
  `${templates.length} seeded solo references`);
const r1 = await round(1);
const r2 = await round(2);
const limit = r1.mem.hwm * (1 + marginPct / 100) + marginMB * 1024;
const grew = r2.mem.hwm - r1.mem.hwm;
console.log(`memory: VmHWM after round 1 ${(r1.mem.hwm / 1024).toFixed(1)} MB, after round 2 ` +
  `${(r2.mem.hwm / 1024).toFixed(1)} MB (growth ${(grew / 1024).toFixed(1)} MB, allowed ${marginPct}% + ${marginMB} MB ` +
  `= ${((limit - r1.mem.hwm) / 1024).toFixed(1)} MB)`);
if (r2.mem.hwm > limit) fail('peak RSS grew in the second identical round', [r1.mem.hwm, r2.mem.hwm]);
for (const { st } of [r1, r2]) {
  if (st.seededCompared === 0 || st.sessionCompared === 0 || st.aborted === 0 || st.invalid === 0 ||
      st.slowReads === 0 || st.unseeded === 0) fail('a round did not exercise every kind of request', st);
}
const total = r1.st.requests + r2.st.requests;
const errs = r1.st.errors + r2.st.errors;
console.log(`total: ${nClients} clients, ${total} requests, ${(r1.secs + r2.secs).toFixed(1)} s of load, ` +
  `errors ${errs}, 429 ${r1.st.rejected429 + r2.st.rejected429}`);
for (const [k, n] of failNotes) console.error(`  ${n}x ${k}`);
process.exit(failures ? 1 : 0);
