// server_structured.mjs - structured outputs through a running `q35 serve` on the chain model
// (chain_model.mjs), with the official clients: `openai` (chat completions, completions,
// Responses) and `@anthropic-ai/sdk` (Messages).
// Env: Q35_URL, Q35_DIR (the chain model's directory), Q35_CHAIN (chain_model.mjs's JSON line),
// Q35_CTX. Exit status 0 = every check passed.
// References, independent of q35: ajv (JSON Schema 2020-12 with ajv-formats) validates every
// output that ended with stop (length-cut outputs are counted, and must be a prefix the check
// does not judge); a grammar's language as a JavaScript regular expression; token ids for
// logit_bias from HF `tokenizers` on the chain model's tokenizer.json; the chain model's fixed
// reasoning text (the constraint must leave the reasoning free).
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'package.json'));
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;
const { Tokenizer } = require('tokenizers');

const base = process.env.Q35_URL;
const dir = process.env.Q35_DIR;
const chain = JSON.parse(process.env.Q35_CHAIN);
const ctx = Number(process.env.Q35_CTX);
const MODEL = 'chain';
const oa = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const an = new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);

let failures = 0, checks = 0;
function check(cond, what, extra) {
  checks++;
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}${extra !== undefined ? ' ' + JSON.stringify(extra).slice(0, 800) : ''}`);
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
async function expectError(what, status, fn, needle) {
  try {
    await fn();
    check(false, `${what}: expected an error ${status}`);
    return null;
  } catch (e) {
    check(e.status === status, `${what}: status ${e.status}, want ${status}`, e && e.message);
    if (needle) check(String(e.message).includes(needle), `${what}: message names '${needle}'`, e.message);
    return e;
  }
}
const tally = { stop: 0, length: 0 };
// A JSON output: when it stopped, it parses and validates; a length cut is only counted.
function validJson(what, text, finish, schema) {
  if (finish === 'length') {
    tally.length++;
    return;
  }
  tally.stop++;
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    check(false, `${what}: the output parses as JSON`, text);
    return;
  }
  const ok = ajv.validate(schema, v);
  check(ok, `${what}: the output validates with ajv`, { text, errors: ajv.errors });
}

const hf = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
const tokenId = async (s) => {
  const ids = (await hf.encode(s, null, { addSpecialTokens: false })).getIds();
  if (ids.length !== 1) throw new Error(`'${s}' is ${ids.length} tokens`);
  return ids[0];
};

// A bounded language: every sample ends (stop) well within the token limit.
const pick = { type: 'object', properties: { ok: { type: 'boolean' }, color: { enum: ['red', 'green', 'blue'] },
  n: { type: 'integer', minimum: -5, maximum: 12 } }, required: ['ok', 'color', 'n'], additionalProperties: false };
const weather = { type: 'object', properties: { city: { type: 'string', enum: ['Rome', 'Berlin'] },
  days: { type: 'integer', minimum: 1, maximum: 7 }, metric: { type: 'boolean' } }, required: ['city', 'days'],
additionalProperties: false };
const chatTools = [{ type: 'function', function: { name: 'get_weather', strict: true, parameters: weather } },
  { type: 'function', function: { name: 'get_time', strict: true, parameters: { type: 'object',
    properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'], additionalProperties: false } } }];
const msgs = [{ role: 'user', content: 'What is the weather?' }];
const think = (on) => ({ chat_template_kwargs: { enable_thinking: on } });

// ================= chat completions =================

await section('chat: response_format json_schema, thinking on (free reasoning) and off, n = 4', async () => {
  for (const on of [true, false]) {
    const r = await oa.chat.completions.create({ model: MODEL, messages: msgs, n: 4, max_tokens: 80, seed: 7,
      response_format: { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema: pick } }, ...think(on) });
    check(r.choices.length === 4, 'four choices');
    for (const c of r.choices) {
      validJson(`json_schema thinking ${on}`, c.message.content, c.finish_reason, pick);
      if (on) check(c.message.reasoning_content === chain.reasoning, 'the reasoning is left free (the chain reply)',
                    c.message.reasoning_content);
    }
    check(r.choices.some((c) => c.finish_reason === 'stop'), `a bounded schema ends with stop (thinking ${on})`,
          r.choices.map((c) => c.finish_reason));
  }
  // the turn may not end inside the reasoning (that would answer with nothing of the schema):
  // a logit_bias forcing <|im_end|> ends it only once the JSON is complete
  const eog = await tokenId('<|im_end|>');
  const f = await oa.chat.completions.create({ model: MODEL, messages: msgs, n: 2, max_tokens: 80, ...think(true),
    logit_bias: { [eog]: 100 }, response_format: { type: 'json_schema', json_schema: { name: 'pick', schema: pick } } });
  for (const c of f.choices) {
    check(c.finish_reason === 'stop', 'forced end: stop', c);
    validJson('forced end of turn', c.message.content, c.finish_reason, pick);
  }
  // streamed: the concatenated deltas validate
  const st = await oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 80, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', schema: pick } }, ...think(false) });
  let text = '', finish = null;
  for await (const ch of st) {
    text += ch.choices[0]?.delta?.content ?? '';
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  validJson('streamed json_schema', text, finish, pick);
  // llama-server's json_schema field
  const l = await oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 80, json_schema: pick,
    ...think(false) });
  validJson('llama-server json_schema', l.choices[0].message.content, l.choices[0].finish_reason, pick);
});

await section('chat: response_format with tools (auto): the answer is JSON of the schema or tool calls', async () => {
  const loose = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
    properties: { city: { type: 'string' } } } } }];
  const r = await oa.chat.completions.create({ model: MODEL, messages: msgs, n: 4, max_tokens: 300, tools: loose,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', schema: pick } }, ...think(true) });
  for (const c of r.choices) {
    if (c.finish_reason === 'tool_calls') check(c.message.tool_calls.length >= 1, 'tool calls', c.message);
    else validJson('JSON or tool calls', c.message.content, c.finish_reason, pick);
  }
});

await section('chat: response_format json_object (logit_bias steers to a short object)', async () => {
  const bias = {};
  for (const s of ['"', '}', ':']) bias[await tokenId(s)] = 8;
  const r = await oa.chat.completions.create({ model: MODEL, messages: msgs, n: 3, max_tokens: 40, seed: 3,
    response_format: { type: 'json_object' }, logit_bias: bias, ...think(false) });
  for (const c of r.choices) {
    validJson('json_object', c.message.content, c.finish_reason, { type: 'object' });
  }
  check(r.choices.some((c) => c.finish_reason === 'stop'), 'json_object: an object closes with stop',
        r.choices.map((c) => [c.finish_reason, c.message.content]));
});

await section('chat: GBNF grammar', async () => {
  const grammar = 'root ::= ("yes" | "no") " " [0-9] [0-9]? ("!" | ".")';
  const re = /^(yes|no) [0-9][0-9]?[!.]$/;
  const r = await oa.chat.completions.create({ model: MODEL, messages: msgs, n: 4, max_tokens: 20, grammar,
    ...think(true) });
  for (const c of r.choices) {
    check(c.finish_reason === 'stop', 'a finite grammar stops', c.finish_reason);
    check(re.test(c.message.content), 'the output matches the grammar', c.message.content);
  }
  await expectError('a grammar with no first token', 400, () => oa.chat.completions.create({ model: MODEL,
    messages: msgs, grammar: 'root ::= [^\\x00-\\U0010FFFF]', ...think(false) }), 'matches no string');
  // a language that dead-ends after "a" is refused when it compiles (its dead end is never entered,
  // so it has no string at all); a request beside it is unharmed
  const [dead, fine] = await Promise.allSettled([
    oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 10, ...think(false),
      grammar: 'root ::= "a" [^\\x00-\\U0010FFFF]' }),
    oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 80, ...think(false),
      response_format: { type: 'json_schema', json_schema: { name: 'pick', schema: pick } } })]);
  check(dead.status === 'rejected' && dead.reason.status === 400 && /matches no string/.test(dead.reason.message),
        'a dead-end constraint fails its own request', dead.reason && dead.reason.message);
  check(fine.status === 'fulfilled', 'its neighbour completes', fine.reason && fine.reason.message);
  if (fine.status === 'fulfilled') validJson('the neighbour', fine.value.choices[0].message.content,
                                             fine.value.choices[0].finish_reason, pick);
  await expectError('a grammar that does not compile', 400, () => oa.chat.completions.create({ model: MODEL,
    messages: msgs, grammar: 'root ::= "a" missing' }), 'missing');
});

await section('completions: json_schema and grammar', async () => {
  const r = await oa.completions.create({ model: MODEL, prompt: 'JSON:', n: 2, max_tokens: 80, json_schema: pick });
  for (const c of r.choices) validJson('completions json_schema', c.text, c.finish_reason, pick);
  const g = await oa.completions.create({ model: MODEL, prompt: 'x', max_tokens: 10, grammar: 'root ::= [a-c]{2,3}' });
  check(/^[a-c]{2,3}$/.test(g.choices[0].text) && g.choices[0].finish_reason === 'stop', 'completions grammar',
        g.choices[0]);
});

await section('chat: tool_choice required / named, strict tools (Qwen3.5 XML calls, arguments by schema)', async () => {
  for (const on of [true, false]) {
    // parallel calls: a random walk over calls, so a length cut is possible (counted); one call: stops
    const r = await oa.chat.completions.create({ model: MODEL, messages: msgs, n: 3, max_tokens: 400,
      tools: chatTools, tool_choice: 'required', ...think(on) });
    const one = await oa.chat.completions.create({ model: MODEL, messages: msgs, n: 2, max_tokens: 400,
      tools: chatTools, tool_choice: 'required', parallel_tool_calls: false, ...think(on) });
    for (const c of [...r.choices, ...one.choices]) {
      if (c.finish_reason === 'length') {
        tally.length++;
        continue;
      }
      check(c.finish_reason === 'tool_calls', `required: finish_reason tool_calls (thinking ${on})`,
            [c.finish_reason, c.message]);
      const calls = c.message.tool_calls || [];
      check(calls.length >= 1, 'required: at least one call', c.message);
      for (const t of calls) {
        const tool = chatTools.find((x) => x.function.name === t.function.name);
        check(tool, 'the call names a tool', t.function.name);
        if (tool) validJson(`required ${t.function.name} arguments`, t.function.arguments, 'stop', tool.function.parameters);
      }
    }
    for (const c of one.choices) {
      check(c.finish_reason === 'tool_calls' && c.message.tool_calls.length === 1,
            'required, parallel_tool_calls false: exactly one call, then stop', c);
    }
  }
  const n = await oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 120, tools: chatTools,
    tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false, ...think(false) });
  const calls = n.choices[0].message.tool_calls || [];
  check(calls.length === 1 && calls[0].function.name === 'get_time', 'named: one call of that function', n.choices[0].message);
  if (calls.length) validJson('named arguments', calls[0].function.arguments, 'stop', chatTools[1].function.parameters);
  // a raw-text string parameter: length bounds hold; a pattern cannot be checked on raw text: 400
  const note = { type: 'object', properties: { text: { type: 'string', minLength: 2, maxLength: 5 } }, required: ['text'],
    additionalProperties: false };
  const nt = await oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 300, n: 2, ...think(false),
    tools: [{ type: 'function', function: { name: 'note', strict: true, parameters: note } }], tool_choice: 'required',
    parallel_tool_calls: false });
  for (const c of nt.choices) {
    if (c.finish_reason === 'length') { // a walk of single characters: counted
      tally.length++;
      continue;
    }
    const t = (c.message.tool_calls || [])[0];
    check(t && t.function.name === 'note', 'note: a call', [c.finish_reason, c.message]);
    if (t) validJson('note arguments (minLength / maxLength)', t.function.arguments, 'stop', note);
  }
  // a raw value never holds a control character (a NUL would cut the text the call parser reads),
  // even when a logit_bias pushes one
  const nul = await tokenId('\u0000');
  const nb = await oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 300, ...think(false),
    tools: [{ type: 'function', function: { name: 'note', strict: true, parameters: note } }], tool_choice: 'required',
    parallel_tool_calls: false, logit_bias: { [nul]: 100 } });
  const nc = nb.choices[0];
  if (nc.finish_reason === 'length') tally.length++;
  else check((nc.message.tool_calls || []).length === 1 && !/[\u0000-\u0008]/.test(nc.message.tool_calls[0].function.arguments),
             'a NUL-biased raw value: a parsed call without control characters', nc);
  await expectError('a strict string parameter with a pattern', 400, () => oa.chat.completions.create({ model: MODEL,
    messages: msgs, tools: [{ type: 'function', function: { name: 'p', strict: true, parameters: { type: 'object',
      properties: { s: { type: 'string', pattern: '^a+$' } } } } }] }), 'pattern');
  // tool_choice auto with strict tools: the text before the call is free (the chain's), the call
  // (from the template's <tool_call> on) follows the schema: the chain's own call (city Paris)
  // is outside the enum, so the constrained one differs
  const a = await oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 600, n: 2, tools: chatTools,
    parallel_tool_calls: false, ...think(false) });
  check(a.choices.some((c) => c.finish_reason !== 'length'), 'auto + strict: a call ends', a.choices);
  const done = a.choices.filter((c) => c.finish_reason !== 'length');
  tally.length += a.choices.length - done.length;
  const m = done.length ? done[0].message : {};
  check(m.content === chain.text, 'auto + strict: the text before the call is free', m.content);
  const ac = m.tool_calls || [];
  check(ac.length >= 1, 'auto + strict: the chain model still calls', m);
  for (const t of ac) {
    const tool = chatTools.find((x) => x.function.name === t.function.name);
    check(tool, 'auto + strict: the call names a tool', t.function.name);
    if (tool) validJson('auto + strict arguments', t.function.arguments, 'stop', tool.function.parameters);
  }
  // the same request without strict: the chain's unconstrained call (Paris) comes back
  const loose = chatTools.map((t) => ({ ...t, function: { ...t.function, strict: false } }));
  const u = await oa.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 120, tools: loose,
    ...think(false) });
  const uc = u.choices[0].message.tool_calls || [];
  check(uc.length === 1 && JSON.parse(uc[0].function.arguments).city === 'Paris', 'auto, not strict: the free call',
        u.choices[0].message);
});

// ================= Responses =================

await section('responses: text.format json_schema / json_object, tool_choice required, errors', async () => {
  for (const effort of ['low', 'none']) {
    const r = await oa.responses.create({ model: MODEL, input: 'pick', max_output_tokens: 100,
      reasoning: { effort }, text: { format: { type: 'json_schema', name: 'pick', strict: true, schema: pick } } });
    validJson(`responses json_schema (effort ${effort})`, r.output_text,
              r.status === 'completed' ? 'stop' : 'length', pick);
    check(r.status === 'completed', 'responses json_schema completes', r.status);
    check(r.text.format.type === 'json_schema', 'the response repeats text.format', r.text);
    if (effort === 'low') {
      const rs = r.output.find((o) => o.type === 'reasoning');
      check(rs && rs.content[0].text === chain.reasoning, 'responses: reasoning left free', r.output);
    }
  }
  const t = await oa.responses.create({ model: MODEL, input: 'call', max_output_tokens: 120, reasoning: { effort: 'none' },
    tool_choice: 'required', tools: chatTools.map((x) => ({ type: 'function', ...x.function })) });
  const fc = t.output.filter((o) => o.type === 'function_call');
  check(fc.length >= 1, 'responses tool_choice required: a function_call item', t.output);
  for (const f of fc) {
    const tool = chatTools.find((x) => x.function.name === f.name);
    if (tool) validJson('responses call arguments', f.arguments, 'stop', tool.function.parameters);
    else check(false, 'responses: the call names a tool', f.name);
  }
  const e = await expectError('responses: a schema that does not compile', 400, () => oa.responses.create({ model: MODEL,
    input: 'x', text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', frobnicate: 1 } } } }),
  'frobnicate');
  check(e && e.param === 'text.format', 'responses: param text.format', e && e.param);
  const long = 'word '.repeat(ctx + 50);
  const c = await expectError('responses: a prompt longer than the context', 400, () => oa.responses.create({
    model: MODEL, input: long }));
  check(c && c.code === 'context_length_exceeded', 'responses: code context_length_exceeded', c && c.code);
});

// ================= Anthropic Messages =================

const aTools = chatTools.map((x) => ({ name: x.function.name, input_schema: x.function.parameters, strict: true }));
await section('messages: tool_choice any / tool, errors', async () => {
  // parallel calls are a random walk over calls (no seed in this API), so the context may cut them:
  // counted, as for chat; with disable_parallel_tool_use the one call must end the turn
  for (const thinking of [{ type: 'enabled', budget_tokens: 1024 }, { type: 'disabled' }]) for (const one of [false, true]) {
    const m = await an.messages.create({ model: MODEL, max_tokens: 2048, tools: aTools,
      tool_choice: { type: 'any', disable_parallel_tool_use: one }, thinking, messages: [{ role: 'user', content: 'weather?' }] });
    const uses = m.content.filter((b) => b.type === 'tool_use');
    if (!one && m.stop_reason === 'model_context_window_exceeded') { // max_tokens is above the context
      tally.length++;
    } else {
      check(m.stop_reason === 'tool_use', `any: stop_reason tool_use (${thinking.type}, one call ${one})`, m);
      if (one) check(uses.length === 1, 'any, disable_parallel_tool_use: exactly one call', m.content);
    }
    check(uses.length >= 1, 'any: a tool_use block', m.content);
    for (const u of uses) {
      const tool = aTools.find((x) => x.name === u.name);
      check(tool && ajv.validate(tool.input_schema, u.input), 'any: the input validates with ajv', [u, ajv.errors]);
    }
    if (thinking.type === 'enabled') {
      const th = m.content.find((b) => b.type === 'thinking');
      check(th && th.thinking === chain.reasoning, 'any: the thinking is left free', m.content);
    }
  }
  const n = await an.messages.create({ model: MODEL, max_tokens: 200, tools: aTools,
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    messages: [{ role: 'user', content: 'weather?' }], thinking: { type: 'disabled' } });
  const uses = n.content.filter((b) => b.type === 'tool_use');
  check(uses.length === 1 && uses[0].name === 'get_weather' && ajv.validate(weather, uses[0].input),
        'tool: one valid call of the named tool', n.content);
  // output_config.format: the answer text follows the schema, the thinking stays free
  for (const thinking of [{ type: 'enabled', budget_tokens: 1024 }, { type: 'disabled' }]) {
    const f = await an.messages.create({ model: MODEL, max_tokens: 1200, thinking, messages: [{ role: 'user', content: 'pick' }],
      output_config: { format: { type: 'json_schema', schema: pick } } });
    const tx = f.content.find((b) => b.type === 'text');
    validJson(`messages output_config.format (${thinking.type})`, tx ? tx.text : '',
              f.stop_reason === 'max_tokens' ? 'length' : 'stop', pick);
    check(f.stop_reason === 'end_turn', `output_config.format: end_turn (${thinking.type})`, f.stop_reason);
    if (thinking.type === 'enabled') {
      const th = f.content.find((b) => b.type === 'thinking');
      check(th && th.thinking === chain.reasoning, 'output_config.format: the thinking is left free', f.content);
    }
  }
  const bad = await expectError('messages: an output_config schema that does not compile', 400, () => an.messages.create({
    model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'x' }],
    output_config: { format: { type: 'json_schema', schema: { type: 'object', frobnicate: 1 } } } }), 'frobnicate');
  check(bad && bad.error && bad.error.type === 'error', 'output_config: Anthropic error shape', bad && bad.error);
  const e = await expectError('messages: tool_choice naming no tool', 400, () => an.messages.create({ model: MODEL,
    max_tokens: 8, tools: aTools, tool_choice: { type: 'tool', name: 'nope' }, messages: [{ role: 'user', content: 'x' }] }),
  'tool_choice');
  check(e && e.error && e.error.type === 'error', 'messages: Anthropic error shape', e && e.error);
  const long = 'word '.repeat(ctx + 50);
  const c = await expectError('messages: a prompt longer than the context', 400, () => an.messages.create({
    model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: long }] }), 'prompt is too long');
  check(c && c.error && c.error.error && c.error.error.type === 'invalid_request_error', 'messages: invalid_request_error',
        c && c.error);
});

console.error(`${checks} checks, ${failures} failed; JSON outputs: ${tally.stop} stopped (validated), ${tally.length} cut by length`);
process.exit(failures ? 1 : 0);
