// server_expose.mjs - q35 serve exposed: API keys, HTTPS and CORS, with the official OpenAI client
// (npm `openai`) and a real browser (Debian's chromium driven by npm `playwright-core`).
// Env: Q35_URL (https://127.0.0.1:PORT, its certificate trusted through NODE_EXTRA_CA_CERTS),
// Q35_MODEL, Q35_KEYS (comma-separated valid keys), Q35_ORIGIN (the allowed page origin),
// Q35_PAGE_PORT / Q35_OTHER_PORT (free ports for the allowed page and a page not allowed),
// Q35_CHROMIUM (the browser; a missing browser or playwright-core fails the check unless
// Q35_NO_BROWSER=1; Q35_PLAYWRIGHT may name another copy of its index.mjs).
// Exit status 0 = every check passed.
import http from 'node:http';
import path from 'node:path';
import OpenAI from 'openai';

const base = process.env.Q35_URL;
const modelId = path.basename(process.env.Q35_MODEL);
const keys = process.env.Q35_KEYS.split(',');
const origin = process.env.Q35_ORIGIN;
const mk = (apiKey) => new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 60000 });

let failures = 0, checks = 0;
function check(cond, what, extra) {
  checks++;
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}${extra !== undefined ? ' ' + JSON.stringify(extra).slice(0, 600) : ''}`);
  }
}
async function section(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    failures++;
    console.error(`FAIL: ${name} threw: ${e && e.stack ? e.stack : e}`);
  }
  console.error(`-- ${name} (${Date.now() - t0} ms)`);
}
async function raw(method, p, { body, headers = {} } = {}) {
  const r = await fetch(base + p, { method, body, headers: { 'content-type': 'application/json', ...headers } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, text, json, headers: r.headers };
}

await section('API keys over HTTPS (the official client)', async () => {
  for (const k of keys) {
    const r = await mk(k).chat.completions.create({ model: modelId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    check(r.choices.length === 1, `key ${k} is let in over HTTPS`);
  }
  for (const bad of ['wrong', keys[0] + 'x', keys[0].slice(0, -1), '']) {
    try {
      await mk(bad || 'none').models.list();
      check(false, `key '${bad}' was let in`);
    } catch (e) {
      check(e instanceof OpenAI.AuthenticationError && e.status === 401, `key '${bad}': 401`, [e.constructor.name, e.status]);
      check(e.error && e.error.type === 'authentication_error' && e.code === 'invalid_api_key', 'OpenAI error shape', e.error);
    }
  }
  const none = await raw('GET', '/v1/models');
  check(none.status === 401 && /Bearer/.test(none.headers.get('www-authenticate') || ''), 'no key: 401 with WWW-Authenticate');
  const xk = await raw('GET', '/v1/models', { headers: { 'x-api-key': keys[0] } });
  check(xk.status === 200, 'x-api-key is accepted', xk.status);
  const anth = await raw('POST', '/v1/messages', { body: '{}' });
  check(anth.status === 401 && anth.json && anth.json.type === 'error' && anth.json.error.type === 'authentication_error',
        '/v1/messages answers 401 in the Anthropic shape', anth.json);
  check(anth.json && anth.json.error && /API key/.test(anth.json.error.message), 'the Anthropic 401 says why', anth.json);
  const anthOk = await raw('POST', '/v1/messages', { headers: { 'x-api-key': keys[0], 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: modelId, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }) });
  check(anthOk.status === 200 && anthOk.json && anthOk.json.type === 'message', '/v1/messages with x-api-key', anthOk.json);
  const count = await raw('POST', '/v1/messages/count_tokens', { body: '{}' });
  check(count.status === 401 && count.json && count.json.type === 'error', '/v1/messages/count_tokens: 401, Anthropic shape',
        count.json);
  const rsp = await raw('POST', '/v1/responses', { body: '{}' });
  check(rsp.status === 401 && rsp.json && rsp.json.error && rsp.json.error.code === 'invalid_api_key',
        '/v1/responses: 401 in the OpenAI shape', rsp.json);
  check((await raw('GET', '/health')).status === 200, '/health needs no key');
  check((await raw('GET', '/metrics')).status === 401, '/metrics needs the key');
  const m = await raw('GET', '/metrics', { headers: { authorization: `Bearer ${keys[1]}` } });
  check(m.status === 200 && /q35_requests_total/.test(m.text), '/metrics with the key');
  // streaming over TLS
  // (seeded and compared with the same request unstreamed: an unseeded tiny model samples
  // end-of-text first about once in 150 requests, so "some text came" is not a contract)
  let text = '', finish = null;
  const req = { model: modelId, prompt: 'tls', max_tokens: 4, seed: 11 };
  for await (const ch of await mk(keys[0]).completions.create({ ...req, stream: true }))
    for (const c of ch.choices) { text += c.text || ''; if (c.finish_reason) finish = c.finish_reason; }
  const whole = await mk(keys[0]).completions.create(req);
  check(finish !== null && finish === whole.choices[0].finish_reason, 'a stream over HTTPS ends with its finish_reason', finish);
  check(text === whole.choices[0].text && (text.length > 0 || finish === 'stop'), 'a stream over HTTPS: the same text as unstreamed',
        [text, whole.choices[0].text]);
});

await section('CORS: preflight and headers', async () => {
  const pre = await raw('OPTIONS', '/v1/chat/completions', { headers: { origin, 'access-control-request-method': 'POST',
    'access-control-request-headers': 'authorization, content-type' } });
  check(pre.status === 204, 'preflight 204', pre.status);
  check(pre.headers.get('access-control-allow-origin') === origin, 'allow-origin', pre.headers.get('access-control-allow-origin'));
  check(/POST/.test(pre.headers.get('access-control-allow-methods') || ''), 'allow-methods');
  check(/authorization/i.test(pre.headers.get('access-control-allow-headers') || ''), 'allow-headers');
  const other = await raw('OPTIONS', '/v1/chat/completions', { headers: { origin: 'http://evil.example',
    'access-control-request-method': 'POST' } });
  check(other.status === 403 && !other.headers.get('access-control-allow-origin'), 'an origin not allowed: 403', other.status);
  const post = await raw('POST', '/v1/completions', { headers: { origin, authorization: `Bearer ${keys[0]}` },
    body: JSON.stringify({ model: modelId, prompt: 'x', max_tokens: 1 }) });
  check(post.status === 200 && post.headers.get('access-control-allow-origin') === origin, 'a response carries the header');
  const denied = await raw('POST', '/v1/completions', { headers: { origin }, body: '{}' });
  check(denied.status === 401 && denied.headers.get('access-control-allow-origin') === origin,
        'a 401 carries the header too (so the page can read it)');
  // the Responses and Messages streams (api_stream) and their errors carry it as well
  const auth = { origin, authorization: `Bearer ${keys[0]}` };
  for (const [p, body] of [['/v1/responses', { model: modelId, input: 'x', max_output_tokens: 2, stream: true }],
    ['/v1/messages', { model: modelId, max_tokens: 2, stream: true, messages: [{ role: 'user', content: 'x' }] }],
    ['/v1/messages', { model: modelId, messages: [] }]]) {
    const r = await raw('POST', p, { headers: auth, body: JSON.stringify(body) });
    check(r.headers.get('access-control-allow-origin') === origin, `${p} (${body.stream ? 'streamed' : 'an error'}): CORS header`,
          [r.status, r.text.slice(0, 200)]);
    if (body.stream) check(r.status === 200 && /text\/event-stream/.test(r.headers.get('content-type') || ''),
                           `${p}: an event stream`, r.status);
  }
});

// A page served from another origin calls the server with fetch: preflight, POST, streaming.
// The browser is part of the suite (.ci/run installs it); only Q35_NO_BROWSER=1 lets a local run go without.
const optional = process.env.Q35_NO_BROWSER === '1';
async function browserCheck() {
  let chromium;
  try {
    ({ chromium } = await import(process.env.Q35_PLAYWRIGHT || 'playwright-core'));
  } catch {
    check(optional, 'playwright-core is installed (tools/setup-peers.sh; Q35_NO_BROWSER=1 skips the browser check)');
    return;
  }
  const exe = process.env.Q35_CHROMIUM;
  if (!exe) {
    check(optional, 'chromium is installed (tools/setup.sh; Q35_NO_BROWSER=1 skips the browser check)');
    return;
  }
  const page = '<!doctype html><title>q35 cors</title>';
  const serve = (port) => new Promise((res) => {
    const s = http.createServer((q, r) => { r.writeHead(200, { 'content-type': 'text/html' }); r.end(page); });
    s.listen(port, '127.0.0.1', () => res(s));
  });
  const allowed = await serve(Number(process.env.Q35_PAGE_PORT));
  const notAllowed = await serve(Number(process.env.Q35_OTHER_PORT));
  const browser = await chromium.launch({ executablePath: exe, args: ['--no-sandbox'] });
  try {
    const ctx = await browser.newContext({ ignoreHTTPSErrors: true });
    const p = await ctx.newPage();
    const call = (pageUrl) => p.goto(pageUrl).then(() => p.evaluate(async ({ url, key, model }) => {
      try {
        const r = await fetch(url + '/v1/chat/completions', { method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer ' + key },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true }) });
        const text = await r.text();
        return { status: r.status, events: text.split('\n\n').filter((x) => x.startsWith('data: ')).length };
      } catch (e) {
        return { error: String(e) };
      }
    }, { url: base, key: keys[0], model: modelId }));
    const ok = await call(origin + '/');
    check(ok.status === 200 && ok.events >= 2, 'the browser page on the allowed origin streams a chat completion', ok);
    const blocked = await call(`http://127.0.0.1:${process.env.Q35_OTHER_PORT}/`);
    check(blocked.error && /fetch/i.test(blocked.error), 'a page on another origin is blocked by the browser', blocked);
  } finally {
    await browser.close();
    allowed.close();
    notAllowed.close();
  }
}
await section('a real browser through CORS', browserCheck);

console.error(`${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
