// server_draft.mjs - speculative decoding through `q35 serve` (issue 19): the same requests to a
// server without speculation (A, --draft 0), one whose every decode row drafts 3 tokens (B,
// --draft 3 --draft-fixed) and one with the defaults (C: on, as the adaptive policy decides) must
// give the same outputs: text, finish reason, token log-probabilities and top alternatives,
// completion tokens. Sequential and all at once (continuous batching), streamed and not, chat and
// completions, n = 2, penalties and filters, a logit bias, a JSON Schema constraint, stop strings,
// Anthropic Messages with a thinking budget (the budget forces </think> in the middle of a row's
// accepted drafts: the row keeps the tokens before it), and a two-turn session whose second turn
// reuses the first one's state (prefix reuse restores the MTP head's state too: the reused turn
// drafts and accepts exactly as the same turn on a fresh session). usage carries draft_tokens /
// draft_accepted_tokens with speculation on and not without; /metrics counts them. Last, requests
// that a fresh server D (as B) serves first, sent to B after all the others: the same outputs and
// the same drafts accepted (the context's draft and logit buffers, reserved and touched ahead
// of a step's largest use, and the slots' sessions with their checkpoint slots, carry nothing over).
// E (the defaults without the scheduler's rows hint) and C give A's outputs with requests queued.
// Env: Q35_URL_A, Q35_URL_B, Q35_URL_C, Q35_URL_D, Q35_URL_E (optional), Q35_MODEL (the served
// model id). Exit 0 = all passed.
import OpenAI from 'openai';

const urls = { A: process.env.Q35_URL_A, B: process.env.Q35_URL_B, C: process.env.Q35_URL_C, D: process.env.Q35_URL_D,
  E: process.env.Q35_URL_E };
const MODEL = process.env.Q35_MODEL;
const client = (u, headers) =>
  new OpenAI({ baseURL: `${u}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000, defaultHeaders: headers });

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

// what must not change with speculation: every choice's text, finish reason and log-probabilities
function norm(res) {
  const ch = (res.choices || []).map((c) => ({
    text: c.message ? c.message.content : c.text,
    finish: c.finish_reason,
    lp: c.logprobs ? JSON.stringify(c.logprobs) : null,
  }));
  return { choices: ch, completion_tokens: res.usage && res.usage.completion_tokens };
}

const chatMsgs = (s) => [{ role: 'user', content: s }];
const schema = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, n: { type: 'integer' } },
  required: ['name', 'n'],
  additionalProperties: false,
};
// the requests: [name, kind, body]
const REQS = [
  ['completion seeded t 0.8 logprobs 3', 'comp', { prompt: 'hello world', max_tokens: 48, seed: 3, temperature: 0.8, logprobs: 3 }],
  ['chat greedy top_logprobs 2', 'chat', { messages: chatMsgs('hi'), max_tokens: 40, temperature: 0, logprobs: true, top_logprobs: 2 }],
  ['chat filters + penalties', 'chat', {
    messages: chatMsgs('tell me'), max_tokens: 40, seed: 11, temperature: 1.2, top_p: 0.9, top_k: 8, min_p: 0.05,
    presence_penalty: 0.5, frequency_penalty: 0.3, logprobs: true, top_logprobs: 3,
  }],
  ['chat n = 2', 'chat', { messages: chatMsgs('two'), max_tokens: 32, seed: 5, temperature: 0.9, n: 2 }],
  ['chat logit_bias', 'chat', { messages: chatMsgs('bias'), max_tokens: 32, seed: 9, temperature: 0.7, logit_bias: { 11: 3, 12: -100 } }],
  ['chat json_schema', 'chat', {
    messages: chatMsgs('json'), max_tokens: 60, seed: 4, temperature: 1.0,
    response_format: { type: 'json_schema', json_schema: { name: 'x', strict: true, schema } },
  }],
  ['completion stop', 'comp', { prompt: 'abc', max_tokens: 40, seed: 21, temperature: 0.6, stop: ['e', 'zz'] }],
  ['chat greedy long', 'chat', { messages: chatMsgs('more'), max_tokens: 80, temperature: 0 }],
];

async function send(u, kind, body, headers) {
  const c = client(u, headers);
  const b = { model: MODEL, ...body };
  return kind === 'chat' ? c.chat.completions.create(b) : c.completions.create(b);
}

// a streamed request, gathered into the non-streamed shape (text, finish, logprobs content)
async function sendStream(u, kind, body) {
  const c = client(u);
  const b = { model: MODEL, ...body, stream: true, stream_options: { include_usage: true } };
  const s = kind === 'chat' ? await c.chat.completions.create(b) : await c.completions.create(b);
  const ch = [];
  let usage = null;
  for await (const ev of s) {
    if (ev.usage) usage = ev.usage;
    for (const x of ev.choices || []) {
      const i = x.index;
      ch[i] = ch[i] || { text: '', finish: null, lp: [] };
      ch[i].text += (x.delta ? x.delta.content : x.text) || '';
      if (x.finish_reason) ch[i].finish = x.finish_reason;
      if (x.logprobs && x.logprobs.content) ch[i].lp.push(...x.logprobs.content);
    }
  }
  return { ch, usage };
}

const results = {};
await section('reference: A (no speculation), one request at a time', async () => {
  for (const [name, kind, body] of REQS) {
    const r = await send(urls.A, kind, body);
    results[name] = norm(r);
    check(r.usage.draft_tokens === undefined && r.usage.draft_accepted_tokens === undefined,
      `${name}: A's usage has no draft fields`, r.usage);
  }
});

let drafted = 0, accepted = 0;
await section('B (3 drafts a row) one at a time: the same outputs', async () => {
  for (const [name, kind, body] of REQS) {
    const r = await send(urls.B, kind, body);
    check(JSON.stringify(norm(r)) === JSON.stringify(results[name]), `B sequential: ${name} differs`,
      { got: norm(r), want: results[name] });
    check(Number.isInteger(r.usage.draft_tokens) && Number.isInteger(r.usage.draft_accepted_tokens) &&
      r.usage.draft_accepted_tokens <= r.usage.draft_tokens, `B: ${name}: usage has the draft counts`, r.usage);
    drafted += r.usage.draft_tokens;
    accepted += r.usage.draft_accepted_tokens;
  }
  check(drafted > 0 && accepted > 0 && accepted < drafted, `B drafted ${drafted}, accepted ${accepted}`);
  console.error(`B: ${accepted} of ${drafted} drafts accepted`);
});

for (const srv of ['B', 'C']) {
  await section(`${srv}: every request at once (one batch)`, async () => {
    const rs = await Promise.all(REQS.map(([, kind, body]) => send(urls[srv], kind, body)));
    REQS.forEach(([name], i) =>
      check(JSON.stringify(norm(rs[i])) === JSON.stringify(results[name]), `${srv} batched: ${name} differs`,
        { got: norm(rs[i]), want: results[name] }));
  });
}

await section('B streamed (with the others in flight): the same text and logprobs', async () => {
  const picks = [0, 1, 2, 5];
  const rs = await Promise.all(picks.map((i) => sendStream(urls.B, REQS[i][1], REQS[i][2])));
  picks.forEach((i, k) => {
    const [name] = REQS[i];
    const want = results[name].choices;
    const got = rs[k].ch;
    check(got.length === want.length && got.every((c, j) => c.text === want[j].text && c.finish === want[j].finish),
      `B streamed: ${name}: text or finish differs`, { got, want });
    if (REQS[i][1] === 'chat' && want[0].lp) {
      const wantLp = JSON.parse(want[0].lp).content;
      check(JSON.stringify(got[0].lp) === JSON.stringify(wantLp), `B streamed: ${name}: logprobs differ`);
    }
    check(rs[k].usage && Number.isInteger(rs[k].usage.draft_tokens), `B streamed: ${name}: usage chunk has draft_tokens`,
      rs[k].usage);
  });
});

await section('sessions: the second turn reuses the first; a fresh session drafts the same', async () => {
  const turn1 = [{ role: 'user', content: 'first question' }];
  const body = { max_tokens: 30, seed: 8, temperature: 0.8 };
  const out = {};
  for (const srv of ['A', 'B']) {
    const h = { session_id: `conv-${srv}` };
    const r1 = await send(urls[srv], 'chat', { ...body, messages: turn1 }, h);
    const msgs = [...turn1, { role: 'assistant', content: r1.choices[0].message.content },
      { role: 'user', content: 'and a second one' }];
    const r2 = await send(urls[srv], 'chat', { ...body, messages: msgs }, h);
    out[srv] = { r1, r2, msgs };
  }
  check(JSON.stringify(norm(out.A.r1)) === JSON.stringify(norm(out.B.r1)), 'session turn 1 differs');
  check(JSON.stringify(norm(out.A.r2)) === JSON.stringify(norm(out.B.r2)), 'session turn 2 differs',
    { a: norm(out.A.r2), b: norm(out.B.r2) });
  const reused = out.B.r2.usage;
  check(reused.prompt_tokens_details.cached_tokens > 0, 'turn 2 reused the first turn', reused);
  const fresh = (await send(urls.B, 'chat', { ...body, messages: out.B.msgs }, { session_id: 'conv-fresh' })).usage;
  check(fresh.prompt_tokens_details.cached_tokens === 0, 'a fresh session reuses nothing', fresh);
  check(reused.draft_tokens === fresh.draft_tokens && reused.draft_accepted_tokens === fresh.draft_accepted_tokens &&
    reused.draft_accepted_tokens > 0, 'the reused prefix drafts as the fresh one', { reused, fresh });
});

// Anthropic Messages, thinking on with a small budget (Q35_TEST_MIN_THINK_BUDGET lowers the floor):
// the budget's forced </think> falls inside rows' accepted drafts; greedy, so A and B must agree
async function messages(u, budget) {
  const r = await fetch(`${u}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({
      model: MODEL, max_tokens: 48, temperature: 0, messages: [{ role: 'user', content: `think ${budget}` }],
      thinking: { type: 'enabled', budget_tokens: budget },
    }),
  });
  const j = await r.json();
  check(r.status === 200, `messages budget ${budget}: status ${r.status}`, j);
  return { content: j.content, stop: j.stop_reason, out: j.usage && j.usage.output_tokens };
}
await section('Messages with a thinking budget: the forced </think> cuts rows (trims)', async () => {
  for (const budget of [2, 3, 4, 5, 6, 7, 9]) {
    const [a, b] = await Promise.all([messages(urls.A, budget), messages(urls.B, budget)]);
    check(JSON.stringify(a) === JSON.stringify(b), `messages budget ${budget} differs`, { a, b });
  }
});

// a fresh server's first requests (one, then four at once) against the same on B after everything
// above: B's slots and context have drafted, verified and rolled back many times by now
await section('a fresh server drafts as one that served other sessions before', async () => {
  const one = { prompt: 'late fresh one', max_tokens: 40, seed: 31, temperature: 0.9, logprobs: 2 };
  const four = [0, 1, 2, 3].map((i) => ({ prompt: `late batch ${i}`, max_tokens: 36, seed: 40 + i, temperature: 0.8,
    logprobs: 1 }));
  const run = async (u) => {
    const r1 = await send(u, 'comp', one);
    const rs = await Promise.all(four.map((b) => send(u, 'comp', b)));
    return [r1, ...rs].map((r) => ({ out: norm(r), drafted: r.usage.draft_tokens, accepted: r.usage.draft_accepted_tokens,
      cached: r.usage.prompt_tokens_details ? r.usage.prompt_tokens_details.cached_tokens : 0 }));
  };
  const d = await run(urls.D);
  const b = await run(urls.B);
  for (let i = 0; i < d.length; i++) {
    check(d[i].cached === 0 && b[i].cached === 0, `late ${i}: no prefix reused`, { d: d[i].cached, b: b[i].cached });
    check(JSON.stringify(d[i].out) === JSON.stringify(b[i].out), `late ${i}: outputs differ from a fresh server's`,
      { d: d[i].out, b: b[i].out });
    check(d[i].drafted === b[i].drafted && d[i].accepted === b[i].accepted && d[i].accepted > 0,
      `late ${i}: drafts differ from a fresh server's`, { d: [d[i].drafted, d[i].accepted], b: [b[i].drafted, b[i].accepted] });
  }
});

// the rows hint (q35_context_draft_rows: the scheduler tells the draft plan how many rows are about
// to run, queued requests included): it decides only whether a cold session starts drafting, so C
// (with it) and E (the defaults with Q35_TEST_NO_DRAFT_HINT=1) give A's outputs: a lone request,
// then six at once on four slots (two wait in the queue), then one more while four run
await section('the rows hint changes no output: C (hint) and E (no hint) as A', async () => {
  if (!urls.E) return;
  const lone = { prompt: 'hint lone', max_tokens: 30, seed: 61, temperature: 0.9, logprobs: 2 };
  const six = [0, 1, 2, 3, 4, 5].map((i) => ({ prompt: `hint six ${i}`, max_tokens: 24 + 3 * i, seed: 70 + i,
    temperature: 0.8, logprobs: 1 }));
  const late = { prompt: 'hint late', max_tokens: 20, seed: 80, temperature: 1, logprobs: 1 };
  const run = async (u) => {
    const r1 = await send(u, 'comp', lone);
    const ps = six.map((b) => send(u, 'comp', b));
    await new Promise((r) => setTimeout(r, 30));
    const rl = await send(u, 'comp', late);
    return [r1, ...(await Promise.all(ps)), rl].map(norm);
  };
  const [a, c, e] = await Promise.all([run(urls.A), run(urls.C), run(urls.E)]);
  for (let i = 0; i < a.length; i++) {
    check(JSON.stringify(c[i]) === JSON.stringify(a[i]), `hint ${i}: C (with the hint) differs from A`, { a: a[i], c: c[i] });
    check(JSON.stringify(e[i]) === JSON.stringify(a[i]), `hint ${i}: E (no hint) differs from A`, { a: a[i], e: e[i] });
  }
});

async function metrics(u) {
  const t = await (await fetch(`${u}/metrics`)).text();
  const m = {};
  for (const line of t.split('\n')) {
    const x = line.match(/^q35_(draft_\w+) ([0-9.e+-]+)$/);
    if (x) m[x[1]] = Number(x[2]);
  }
  return m;
}
await section('/metrics', async () => {
  const [a, b, c] = await Promise.all([metrics(urls.A), metrics(urls.B), metrics(urls.C)]);
  check(a.draft_max === 0 && a.draft_tokens_total === 0, 'A: no speculation', a);
  check(b.draft_max === 3 && b.draft_tokens_total > 0 && b.draft_accepted_tokens_total > 0 && b.draft_rows_total > 0 &&
    b.draft_acceptance > 0 && b.draft_acceptance < 1, 'B: drafts counted', b);
  check(Math.abs(b.draft_acceptance - b.draft_accepted_tokens_total / b.draft_tokens_total) < 1e-5, 'B: acceptance', b);
  check(b.draft_trims_total > 0, 'B: the thinking budget cut rows of accepted drafts', b);
  check(c.draft_max === 2, 'C: on by default (2 drafts at most) with an MTP head', c);
  console.error(`metrics B: ${JSON.stringify(b)}; C: ${JSON.stringify(c)}`);
});

console.error(`${checks} checks, ${failures} failed`);
process.exit(failures ? 1 : 0);
