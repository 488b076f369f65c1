// server_test.mjs - drives a running `q35 serve` with the official OpenAI client (npm `openai`).
// Env: Q35_URL (http://127.0.0.1:PORT), Q35 (binary), Q35_MODEL (the served GGUF), Q35_CTX,
// Q35_MAX_BODY, Q35_PARALLEL, Q35_MAX_QUEUE. Exit status 0 = every check passed.
// References: token counts from POST /tokenize are checked against `q35 tokenize` on the
// model file and against the ChatML text written out by hand; reproducibility compares
// the server with itself under different schedules (alone / concurrent / warm / cold).
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import OpenAI from 'openai';

const base = process.env.Q35_URL;
const Q35 = process.env.Q35;
const modelPath = process.env.Q35_MODEL;
const ctx = Number(process.env.Q35_CTX);
const maxBody = Number(process.env.Q35_MAX_BODY);
const parallel = Number(process.env.Q35_PARALLEL);
const maxQueue = Number(process.env.Q35_MAX_QUEUE);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });

let failures = 0, checks = 0;
function check(cond, what, extra) {
  checks++;
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}${extra !== undefined ? ' ' + JSON.stringify(extra) : ''}`);
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
async function expectError(what, cls, status, fn, param) {
  try {
    await fn();
    check(false, `${what}: expected ${cls.name}`);
  } catch (e) {
    check(e instanceof cls, `${what}: error class ${e && e.constructor && e.constructor.name}, want ${cls.name}`,
          e && e.message);
    check(e.status === status, `${what}: status ${e.status}, want ${status}`);
    if (param) check(e.param === param || (e.error && e.error.param === param), `${what}: param ${e.param}, want ${param}`);
    check(typeof (e.error && e.error.message) === 'string' && e.error.message.length > 0, `${what}: error message`);
  }
}
async function raw(method, p, body, headers = {}) {
  const r = await fetch(base + p, { method, body, headers: { 'content-type': 'application/json', ...headers } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, text, json };
}
async function metrics() {
  const r = await raw('GET', '/metrics');
  const m = {};
  for (const line of r.text.split('\n')) {
    const k = line.match(/^(q35_\w+) ([0-9.eE+-]+)$/);
    if (k) m[k[1]] = Number(k[2]);
  }
  return m;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const chatml = (msgs) => msgs.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') +
  '<|im_start|>assistant\n';
const q35Tokens = (text) =>
  execFileSync(Q35, ['tokenize', '-m', modelPath, '--text', text], { encoding: 'utf8' }).trim().split(/\s+/)
    .filter((s) => s.length).map(Number);

let modelId;

await section('models', async () => {
  const list = await client.models.list();
  check(list.data.length === 1, 'one model', list.data);
  modelId = list.data[0].id;
  check(modelId === path.basename(modelPath), `model id is the file base name`, modelId);
});

await section('completions: usage, logprobs, seed reproduces, stream == non-stream', async () => {
  const prompt = 'the quick brown fox jumps over';
  const req = { model: modelId, prompt, max_tokens: 12, seed: 42, temperature: 1, logprobs: 3 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  const ids = q35Tokens(prompt);
  const tk = await raw('POST', '/tokenize', JSON.stringify({ content: prompt }));
  check(JSON.stringify(tk.json.tokens) === JSON.stringify(ids), '/tokenize equals q35 tokenize', [tk.json.tokens, ids]);
  check(a.usage.prompt_tokens === ids.length, 'prompt_tokens', [a.usage.prompt_tokens, ids.length]);
  check(a.object === 'text_completion' && a.seed === 42, 'object and seed', [a.object, a.seed]);
  const c0 = a.choices[0];
  check(c0.logprobs && c0.logprobs.tokens.length === a.usage.completion_tokens, 'one logprob per completion token',
        [c0.logprobs && c0.logprobs.tokens.length, a.usage.completion_tokens]);
  check(c0.logprobs.token_logprobs.every((x) => x <= 0), 'logprobs <= 0');
  check(c0.logprobs.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 3), 'top_logprobs');
  check(a.usage.total_tokens === a.usage.prompt_tokens + a.usage.completion_tokens, 'total_tokens');
  check(c0.finish_reason === 'length' ? a.usage.completion_tokens === 12 : c0.finish_reason === 'stop', 'finish');
  check(c0.text === b.choices[0].text && JSON.stringify(c0.logprobs.token_logprobs) ===
        JSON.stringify(b.choices[0].logprobs.token_logprobs), 'same seed, same output', [c0.text, b.choices[0].text]);
  const stream = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text += c.text || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(text === c0.text, 'streamed text equals non-streamed', [text, c0.text]);
  check(finish === c0.finish_reason, 'streamed finish_reason', finish);
  check(usage && usage.completion_tokens === a.usage.completion_tokens && usage.prompt_tokens === ids.length,
        'streamed usage chunk', usage);
  const unseeded = await client.completions.create({ model: modelId, prompt, max_tokens: 2 });
  check(Number.isInteger(unseeded.seed) && unseeded.seed >= 0, 'unseeded request reports its seed', unseeded.seed);
  // a token-id prompt gives the same result as the text
  const byIds = await client.completions.create({ ...req, prompt: ids });
  check(byIds.choices[0].text === c0.text, 'token-id prompt == text prompt');
  // a request that would run past the context stops there with finish_reason length
  const longPrompt = Array.from({ length: ctx - 6 }, (_, i) => ids[i % ids.length]);
  const edge = await client.completions.create({ model: modelId, prompt: longPrompt, max_tokens: 100, seed: 3,
    stop: null, logit_bias: null });
  check(edge.usage.prompt_tokens === ctx - 6, 'long prompt tokens', edge.usage);
  check(edge.choices[0].finish_reason === 'length' ? edge.usage.completion_tokens === 6 :
        edge.usage.completion_tokens < 6, 'generation stops at the context limit', [edge.choices[0].finish_reason,
          edge.usage.completion_tokens]);
  // n choices
  const nres = await client.completions.create({ ...req, n: 2 });
  check(nres.choices.length === 2 && nres.choices[0].text === c0.text, 'n=2: choice 0 equals n=1',
        nres.choices.map((c) => c.text));
  // stop string: the text ends before it and the finish reason is stop
  const cut = c0.text.slice(4, 7);
  if (cut.length === 3 && !c0.text.slice(0, 4).includes(cut)) {
    const st = await client.completions.create({ ...req, stop: [cut] });
    check(st.choices[0].text === c0.text.slice(0, c0.text.indexOf(cut)) && st.choices[0].finish_reason === 'stop',
          'stop string', [st.choices[0].text, cut]);
  }
});

await section('chat: non-stream and stream, usage against ChatML', async () => {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello there' }];
  const req = { model: modelId, messages, max_tokens: 10, seed: 5, temperature: 0.9, logprobs: true, top_logprobs: 2 };
  const a = await client.chat.completions.create(req);
  // the server runs with --no-think: the generation prompt holds an empty think block
  const ids = q35Tokens(chatml(messages) + '<think>\n\n</think>\n\n');
  check(a.usage.prompt_tokens === ids.length, 'chat prompt_tokens equals the ChatML rendering', [a.usage.prompt_tokens,
    ids.length]);
  check(a.object === 'chat.completion' && a.choices[0].message.role === 'assistant', 'chat object');
  const lp = a.choices[0].logprobs.content;
  check(lp.length === a.usage.completion_tokens, 'chat logprobs per token', [lp.length, a.usage.completion_tokens]);
  check(lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2 && Array.isArray(e.bytes)), 'chat logprob entries');
  check(typeof a.usage.prompt_tokens_details.cached_tokens === 'number', 'cached_tokens present');
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let content = '', reasoning = '', finish = null, usage = null, role = null, nlp = 0;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content || '';
      reasoning += c.delta.reasoning_content || '';
      if (c.logprobs && c.logprobs.content) nlp += c.logprobs.content.length;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  const m = a.choices[0].message;
  check(role === 'assistant', 'stream role');
  check(content.trim() === (m.content || '').trim() && reasoning.trim() === (m.reasoning_content || '').trim(),
        'streamed chat equals non-streamed', [content, m.content]);
  check(finish === a.choices[0].finish_reason, 'stream finish reason');
  check(usage && usage.completion_tokens === a.usage.completion_tokens, 'stream usage');
  check(nlp === a.usage.completion_tokens, 'stream logprobs', [nlp, a.usage.completion_tokens]);
  // chat_template_kwargs.enable_thinking overrides --no-think: no empty think block
  const on = await client.chat.completions.create({ ...req, chat_template_kwargs: { enable_thinking: true } });
  const idsOn = q35Tokens(chatml(messages));
  check(on.usage.prompt_tokens === idsOn.length, 'enable_thinking true', [on.usage.prompt_tokens, idsOn.length]);
});

await section('concurrency: N clients at once get what each gets alone', async () => {
  const reqs = [0, 1, 2, 3, 4, 5].map((i) => ({
    model: modelId, max_tokens: 16 + 3 * i, seed: 100 + i, temperature: 1, top_k: 40,
    messages: [{ role: 'user', content: `question number ${i} ${'abc '.repeat(i * 7)}` }],
  }));
  const alone = [];
  for (const r of reqs) alone.push(await client.chat.completions.create(r));
  const m0 = await metrics();
  const together = await Promise.all(reqs.map((r) => client.chat.completions.create(r)));
  const m1 = await metrics();
  for (let i = 0; i < reqs.length; i++) {
    check(together[i].choices[0].message.content === alone[i].choices[0].message.content &&
          together[i].usage.completion_tokens === alone[i].usage.completion_tokens, `request ${i}: concurrent == alone`,
          [together[i].choices[0].message.content, alone[i].choices[0].message.content]);
  }
  // the batch really shared steps: fewer steps than rows
  const steps = m1.q35_steps_total - m0.q35_steps_total, rows = m1.q35_step_rows_total - m0.q35_step_rows_total;
  check(rows > steps, 'concurrent requests shared model steps', { steps, rows });
});

await section('prefix reuse: warm multi-turn equals cold', async () => {
  const sys = { role: 'system', content: 'You answer in riddles.' };
  const turn1 = [sys, { role: 'user', content: 'what walks on four legs in the morning' }];
  const opts = { model: modelId, max_tokens: 12, seed: 9, temperature: 0.7, logprobs: true };
  const h = (id) => ({ headers: { session_id: id } });
  const w1 = await client.chat.completions.create({ ...opts, messages: turn1 }, h('conv-warm'));
  const turn2 = [...turn1, { role: 'assistant', content: w1.choices[0].message.content || 'x' },
    { role: 'user', content: 'and at night?' }];
  const w2 = await client.chat.completions.create({ ...opts, messages: turn2 }, h('conv-warm'));
  const c2 = await client.chat.completions.create({ ...opts, messages: turn2 }, h('conv-cold'));
  check(w2.usage.prompt_tokens_details.cached_tokens > 0, 'second turn reuses prompt tokens',
        w2.usage.prompt_tokens_details);
  check(c2.usage.prompt_tokens_details.cached_tokens === 0, 'a new session starts cold', c2.usage.prompt_tokens_details);
  check(w2.choices[0].message.content === c2.choices[0].message.content, 'warm == cold text',
        [w2.choices[0].message.content, c2.choices[0].message.content]);
  check(JSON.stringify(w2.choices[0].logprobs.content.map((e) => e.logprob)) ===
        JSON.stringify(c2.choices[0].logprobs.content.map((e) => e.logprob)), 'warm == cold logprobs');
  // X-Session-Id spelling, then reset and delete
  const x = await client.chat.completions.create({ ...opts, messages: turn2 }, { headers: { 'X-Session-Id': 'conv-warm' } });
  check(x.usage.prompt_tokens_details.cached_tokens > 0, 'X-Session-Id routes to the same session');
  check(x.choices[0].message.content === c2.choices[0].message.content, 'third warm run == cold');
  check((await raw('POST', '/v1/sessions/conv-warm/reset')).status === 200, 'reset session');
  const afterReset = await client.chat.completions.create({ ...opts, messages: turn2 }, h('conv-warm'));
  check(afterReset.usage.prompt_tokens_details.cached_tokens === 0, 'reset session starts cold');
  check((await raw('DELETE', '/v1/sessions/conv-warm')).status === 200, 'delete session');
  const d2 = await raw('DELETE', '/v1/sessions/conv-warm');
  check(d2.status === 404 && d2.json && d2.json.error, 'deleting again is 404', d2.status);
  check((await raw('POST', '/v1/sessions/none-such/reset')).status === 404, 'reset unknown session is 404');
  const m = await metrics();
  check(m.q35_prompt_tokens_reused_total > 0, 'metrics count reused prompt tokens', m.q35_prompt_tokens_reused_total);
});

await section('errors surface as the client error types', async () => {
  const msgs = [{ role: 'user', content: 'hi' }];
  const chat = (extra) => () => client.chat.completions.create({ model: modelId, messages: msgs, max_tokens: 2, ...extra });
  await expectError('temperature 2.5', OpenAI.BadRequestError, 400, chat({ temperature: 2.5 }), 'temperature');
  await expectError('temperature wrong type', OpenAI.BadRequestError, 400, chat({ temperature: 'hot' }), 'temperature');
  await expectError('top_p 0', OpenAI.BadRequestError, 400, chat({ top_p: 0 }), 'top_p');
  await expectError('presence_penalty 3', OpenAI.BadRequestError, 400, chat({ presence_penalty: 3 }), 'presence_penalty');
  await expectError('frequency_penalty -2.5', OpenAI.BadRequestError, 400, chat({ frequency_penalty: -2.5 }),
                    'frequency_penalty');
  await expectError('seed -1', OpenAI.BadRequestError, 400, chat({ seed: -1 }), 'seed');
  await expectError('seed 1.5', OpenAI.BadRequestError, 400, chat({ seed: 1.5 }), 'seed');
  await expectError('n 0', OpenAI.BadRequestError, 400, chat({ n: 0 }), 'n');
  await expectError('five stop strings', OpenAI.BadRequestError, 400, chat({ stop: ['a', 'b', 'c', 'd', 'e'] }), 'stop');
  await expectError('top_logprobs 21', OpenAI.BadRequestError, 400, chat({ logprobs: true, top_logprobs: 21 }),
                    'top_logprobs');
  await expectError('max_tokens 0', OpenAI.BadRequestError, 400, chat({ max_tokens: 0 }), 'max_tokens');
  await expectError('stream wrong type', OpenAI.BadRequestError, 400, chat({ stream: 'yes' }), 'stream');
  await expectError('unknown model', OpenAI.BadRequestError, 400, chat({ model: 'gpt-17' }), 'model');
  await expectError('messages missing', OpenAI.BadRequestError, 400,
                    () => client.chat.completions.create({ model: modelId }), 'messages');
  await expectError('bad role', OpenAI.BadRequestError, 400,
                    () => client.chat.completions.create({ model: modelId, messages: [{ role: 'wizard', content: 'x' }] }),
                    'messages');
  await expectError('prompt longer than the context', OpenAI.BadRequestError, 400,
                    () => client.completions.create({ model: modelId, prompt: 'lorem ipsum '.repeat(ctx) }), 'prompt');
  await expectError('token id out of range', OpenAI.BadRequestError, 400,
                    () => client.completions.create({ model: modelId, prompt: [1, 2, 99999999] }), 'prompt');
  await expectError('unknown endpoint', OpenAI.NotFoundError, 404, () => client.get('/no/such/endpoint'));
  // raw HTTP: malformed JSON, non-object body, oversized body, unknown endpoint
  const bad = await raw('POST', '/v1/chat/completions', '{"messages": [');
  check(bad.status === 400 && bad.json && bad.json.error.type === 'invalid_request_error' &&
        /JSON/.test(bad.json.error.message), 'malformed JSON is a 400', bad.text);
  const arr = await raw('POST', '/v1/completions', '[1, 2]');
  check(arr.status === 400 && arr.json && arr.json.error, 'a non-object body is a 400', arr.text);
  const big = await raw('POST', '/v1/completions', JSON.stringify({ prompt: 'x'.repeat(maxBody + 10) }));
  check(big.status === 413 && big.json && big.json.error, 'oversized body is a 413', [big.status, big.text.slice(0, 200)]);
  const nf = await raw('GET', '/v1/nothing-here');
  check(nf.status === 404 && nf.json && nf.json.error && nf.json.error.message, 'unknown endpoint is a 404 body', nf.text);
  const det = await raw('POST', '/detokenize', JSON.stringify({ tokens: q35Tokens('hello world') }));
  check(det.status === 200 && det.json.content === 'hello world', 'detokenize round trip', det.text);
  // the server is still healthy after all that
  check((await raw('GET', '/health')).status === 200, 'healthy after bad requests');
});

await section('limits: queue full is 429, a client that disconnects frees its slot', async () => {
  const controllers = [];
  const streams = [];
  const long = (i) => ({ model: modelId, prompt: `stream number ${i}`, max_tokens: ctx - 40, temperature: 1, seed: i,
    stream: true });
  // fill every slot, each stream having produced a first chunk
  for (let i = 0; i < parallel; i++) {
    const ac = new AbortController();
    controllers.push(ac);
    const s = await client.completions.create(long(i), { signal: ac.signal });
    const it = s[Symbol.asyncIterator]();
    await it.next();
    streams.push(it);
  }
  // then the queue
  const queued = [];
  for (let i = 0; i < maxQueue; i++) {
    const ac = new AbortController();
    controllers.push(ac);
    queued.push(client.completions.create(long(100 + i), { signal: ac.signal }).catch((e) => e));
  }
  let m = await metrics();
  for (let k = 0; k < 200 && m.q35_requests_queued < maxQueue; k++) {
    await sleep(20);
    m = await metrics();
  }
  check(m.q35_requests_active === parallel && m.q35_requests_queued === maxQueue, 'slots and queue are full',
        [m.q35_requests_active, m.q35_requests_queued]);
  await expectError('queue full', OpenAI.RateLimitError, 429,
                    () => client.completions.create({ model: modelId, prompt: 'one more', max_tokens: 2 }));
  const before = m.q35_generated_tokens_total;
  for (const ac of controllers) ac.abort();
  await Promise.all(queued);
  for (let k = 0; k < 500; k++) {
    m = await metrics();
    if (m.q35_requests_active === 0 && m.q35_requests_queued === 0) break;
    await sleep(20);
  }
  check(m.q35_requests_active === 0 && m.q35_requests_queued === 0, 'disconnected clients freed their slots',
        [m.q35_requests_active, m.q35_requests_queued]);
  check(m.q35_requests_cancelled_total >= parallel, 'cancellations counted', m.q35_requests_cancelled_total);
  check(m.q35_generated_tokens_total - before < parallel * (ctx - 40), 'aborted streams stopped early',
        m.q35_generated_tokens_total - before);
  const after = await client.completions.create({ model: modelId, prompt: 'still alive?', max_tokens: 3, seed: 1 });
  check(after.choices.length === 1, 'serves again after the disconnects');
});

console.error(`${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
