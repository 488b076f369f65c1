// api_test.mjs - drives a running `q35 serve` (the chain model of chain_model.mjs, --no-think)
// with the official clients: `openai` (Responses API), `@anthropic-ai/sdk` (Messages API) and the
// Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`, on chat completions).
// Env: Q35_URL, Q35_DIR (the chain model's directory: tokenizer.json, tokenizer_config.json),
// Q35_CHAIN (chain_model.mjs's JSON line). Exit status 0 = every check passed.
// References, independent of q35: the replies are fixed by the chain model's construction
// (chain_model.mjs), prompt token counts come from rendering the expected chat conversation
// with @huggingface/jinja and tokenizing it with HF `tokenizers`.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'package.json'));
const { Template } = await import(require.resolve('@huggingface/jinja'));
const { Tokenizer } = require('tokenizers');

const base = process.env.Q35_URL;
const dir = process.env.Q35_DIR;
const chain = JSON.parse(process.env.Q35_CHAIN);
const MODEL = 'chain';
const WHOLE = chain.text + '<tool_call>' + chain.call + '</tool_call>'; // the reply when tools are off
const oa = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30000 });
const an = new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 30000 });

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

// ---- references ----
const template = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')).chat_template;
const hfTok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
async function refCount(messages, { tools, think = false, prefill = '' } = {}) {
  const vars = { messages, add_generation_prompt: true, bos_token: '', eos_token: '<|im_end|>', enable_thinking: think };
  if (tools) vars.tools = tools;
  const text = new Template(template).render(vars) + prefill;
  const enc = await hfTok.encode(text, null, { addSpecialTokens: false });
  return enc.getIds().length;
}
const weatherParams = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
const chatTools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: weatherParams } }];
const rTools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city', parameters: weatherParams }];
const aTools = [{ name: 'get_weather', description: 'Weather of a city', input_schema: weatherParams }];
const assistantCall = { role: 'assistant', content: chain.text,
  tool_calls: [{ type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] };

// ================= OpenAI Responses API =================

let r1;
await section('responses: text and usage', async () => {
  const r = await oa.responses.create({ model: MODEL, input: 'hi', instructions: 'Be brief.' });
  check(r.object === 'response' && r.status === 'completed', 'completed response', r.status);
  check(r.id.startsWith('resp_'), 'response id', r.id);
  check(r.output_text === WHOLE, 'output_text is the chain reply', r.output_text);
  check(r.output.length === 1 && r.output[0].type === 'message' && r.output[0].role === 'assistant', 'one message', r.output);
  const want = await refCount([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }]);
  check(r.usage.input_tokens === want, 'input_tokens = the reference rendering', [r.usage.input_tokens, want]);
  check(r.usage.output_tokens === 4, 'output_tokens: TEXT <tool_call> CALL </tool_call> (the end token is not counted)', r.usage.output_tokens);
  check(r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, 'total_tokens');
  check(r.instructions === 'Be brief.' && r.model === 'chain.gguf', 'echoed fields', [r.instructions, r.model]);
  const d = await oa.responses.create({ model: MODEL, instructions: 'Be brief.',
    input: [{ role: 'developer', content: 'Use metric units.' }, { role: 'user', content: 'hi' }] });
  const wantD = await refCount([{ role: 'system', content: 'Be brief.\n\nUse metric units.' }, { role: 'user', content: 'hi' }]);
  check(d.usage.input_tokens === wantD, 'instructions + a developer message: one system message', [d.usage.input_tokens, wantD]);
  const c = await oa.responses.inputTokens.count({ model: MODEL, input: 'hi', instructions: 'Be brief.' });
  check(c.input_tokens === want, 'responses.inputTokens.count', c);
});

await section('responses: function call, round trip with previous_response_id', async () => {
  r1 = await oa.responses.create({ model: MODEL, input: 'Weather in Paris?', tools: rTools, metadata: { k: 'v' }, user: 'u1' });
  check(r1.output.length === 2, 'message + function_call', r1.output);
  check(r1.output[0].type === 'message' && r1.output[0].content[0].text === chain.text, 'the text item', r1.output[0]);
  const fc = r1.output[1];
  check(fc.type === 'function_call' && fc.name === 'get_weather' && fc.status === 'completed', 'function_call item', fc);
  check(JSON.parse(fc.arguments).city === 'Paris', 'arguments', fc.arguments);
  check(/^call_[0-9a-f]{16}$/.test(fc.call_id), 'call_id', fc.call_id);
  check(r1.metadata.k === 'v' && r1.user === 'u1', 'metadata and user echoed', [r1.metadata, r1.user]);
  const r2 = await oa.responses.create({ model: MODEL, previous_response_id: r1.id, tools: rTools,
    input: [{ type: 'function_call_output', call_id: fc.call_id, output: 'sunny, 21 C' }] });
  const conv = [{ role: 'user', content: 'Weather in Paris?' }, assistantCall, { role: 'tool', content: 'sunny, 21 C' }];
  const want = await refCount(conv, { tools: chatTools });
  check(r2.usage.input_tokens === want, 'previous_response_id: input_tokens = the reference', [r2.usage.input_tokens, want]);
  check(r2.usage.input_tokens_details.cached_tokens > 0, 'the previous prefix is reused', r2.usage.input_tokens_details);
  check(r2.previous_response_id === r1.id, 'previous_response_id echoed');
  // the same conversation as explicit items
  const r3 = await oa.responses.create({ model: MODEL, tools: rTools, store: false,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] }, ...r1.output,
            { type: 'function_call_output', call_id: fc.call_id, output: 'sunny, 21 C' }] });
  check(r3.usage.input_tokens === want, 'explicit items: input_tokens = the reference', [r3.usage.input_tokens, want]);
  await expectError('previous_response_id of a store:false response', 404,
    () => oa.responses.create({ model: MODEL, previous_response_id: r3.id, input: 'x' }), r3.id);
  const got = await oa.responses.retrieve(r1.id);
  check(got.id === r1.id && got.output.length === 2, 'retrieve', got.id);
  // retrieve's stream / include query parameters: refused by name (no background responses, no extra output)
  await expectError('retrieve with stream: true', 400, () => oa.responses.retrieve(r1.id, { stream: true }), 'background');
  await expectError('retrieve with include', 400, () => oa.responses.retrieve(r1.id, { include: ['message.output_text.logprobs'] }),
    'include');
  await oa.responses.delete(r3.id).then(() => check(false, 'deleting an unstored response is a 404'), (e) =>
    check(e.status === 404, 'delete unknown: 404', e.status));
});

await section('responses: reasoning, max_output_tokens', async () => {
  const r = await oa.responses.create({ model: MODEL, input: 'hi', reasoning: { effort: 'high' }, tools: rTools });
  check(r.output.map((o) => o.type).join() === 'reasoning,message,function_call', 'reasoning first', r.output);
  check(r.output[0].content[0].type === 'reasoning_text' && r.output[0].content[0].text === chain.reasoning,
        'reasoning text', r.output[0]);
  check(r.usage.output_tokens_details.reasoning_tokens === 2, 'reasoning_tokens (sentence + </think>)', r.usage);
  const want = await refCount([{ role: 'user', content: 'hi' }], { tools: chatTools, think: true });
  check(r.usage.input_tokens === want, 'thinking prompt = the reference', [r.usage.input_tokens, want]);
  // reasoning items go back as the assistant turn's reasoning (the template shows it after the last user turn)
  const items = [{ role: 'user', content: 'hi' }, ...r.output,
    { type: 'function_call_output', call_id: r.output[2].call_id, output: 'sunny' }];
  const n1 = await oa.responses.inputTokens.count({ model: MODEL, input: items, tools: rTools, reasoning: { effort: 'high' } });
  const n2 = await oa.responses.inputTokens.count({ model: MODEL, previous_response_id: r.id, tools: rTools,
    reasoning: { effort: 'high' }, input: [items[4]] });
  const wantR = await refCount([{ role: 'user', content: 'hi' }, { ...assistantCall, reasoning_content: chain.reasoning },
    { role: 'tool', content: 'sunny' }], { tools: chatTools, think: true });
  check(n1.input_tokens === wantR && n2.input_tokens === wantR, 'reasoning items round trip', [n1, n2, wantR]);
  const noR = await refCount([{ role: 'user', content: 'hi' }, assistantCall, { role: 'tool', content: 'sunny' }],
    { tools: chatTools, think: true });
  check(noR < wantR, 'the reference renders the reasoning (the check above means something)', [noR, wantR]);
  const s = await oa.responses.create({ model: MODEL, input: 'hi', max_output_tokens: 1 });
  check(s.status === 'incomplete' && s.incomplete_details.reason === 'max_output_tokens', 'incomplete', s.status);
  check(s.output_text === chain.text && s.usage.output_tokens === 1, 'one token of text', s.output_text);
});

await section('responses: streaming', async () => {
  const plain = await oa.responses.create({ model: MODEL, input: 'hi', reasoning: { effort: 'low' }, tools: rTools });
  const stream = oa.responses.stream({ model: MODEL, input: 'hi', reasoning: { effort: 'low' }, tools: rTools });
  const types = [], seqs = [];
  let text = '', args = '', reasoning = '';
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  for await (const ev of stream) {
    types.push(ev.type);
    seqs.push(ev.sequence_number);
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
    if (ev.type === 'response.reasoning_text.delta') reasoning += ev.delta;
  }
  const fin = await stream.finalResponse();
  check(seqs.every((s, i) => s === i), 'sequence_number counts from 0', seqs);
  const want = ['response.created', 'response.in_progress',
    'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta',
    'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.done',
    'response.output_item.done', 'response.completed'];
  check(JSON.stringify(types) === JSON.stringify(want), 'the event sequence', types);
  check(text === chain.text && reasoning === chain.reasoning && JSON.parse(args).city === 'Paris', 'deltas', [text, reasoning, args]);
  // ids differ; the SDK's stream helper adds parsed / parsed_arguments
  const strip = (o) => JSON.parse(JSON.stringify(o, (k, v) => (['id', 'call_id', 'parsed', 'parsed_arguments'].includes(k) ? undefined : v)));
  check(JSON.stringify(strip(fin.output)) === JSON.stringify(strip(plain.output)), 'streamed output = non-streamed',
        [fin.output, plain.output]);
  check(fin.usage.input_tokens === plain.usage.input_tokens && fin.usage.output_tokens === plain.usage.output_tokens,
        'streamed usage', fin.usage);
  const inc = await oa.responses.create({ model: MODEL, input: 'hi', stream: true, max_output_tokens: 1 });
  let last;
  for await (const ev of inc) last = ev;
  check(last.type === 'response.incomplete' && last.response.status === 'incomplete', 'response.incomplete', last.type);
});

await section('responses: refusals', async () => {
  await expectError('built-in tool', 400, () => oa.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'web_search' }] }), 'web_search');
  // forced calls and text.format are constrained decoding (test_server_structured checks their output)
  await expectError('tool_choice allowed_tools', 400, () => oa.responses.create({ model: MODEL, input: 'x', tools: rTools, tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [] } }), 'allowed_tools');
  await expectError('named tool_choice not in tools', 400, () => oa.responses.create({ model: MODEL, input: 'x', tools: rTools, tool_choice: { type: 'function', name: 'nope' } }), 'not in');
  await expectError('json_schema without a name', 400, () => oa.responses.create({ model: MODEL, input: 'x', text: { format: { type: 'json_schema', schema: {} } } }), 'text.format');
  await expectError('text.format yaml', 400, () => oa.responses.create({ model: MODEL, input: 'x', text: { format: { type: 'yaml' } } }), 'yaml');
  await expectError('unknown field', 400, () => oa.responses.create({ model: MODEL, input: 'x', frobnicate: 1 }), 'frobnicate');
  await expectError('image input', 400, () => oa.responses.create({ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] }), 'vision');
  await expectError('unknown previous_response_id', 404, () => oa.responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_nope' }), 'resp_nope');
  await expectError('wrong model', 400, () => oa.responses.create({ model: 'gpt-4o', input: 'x' }), 'gpt-4o');
  await expectError('temperature out of range', 400, () => oa.responses.create({ model: MODEL, input: 'x', temperature: 3 }), 'temperature');
  await expectError('input of the wrong type', 400, () => oa.responses.create({ model: MODEL, input: 42 }), 'input');
  await expectError('no input', 400, () => oa.responses.create({ model: MODEL }), 'input');
  await expectError('unknown item type', 400, () => oa.responses.create({ model: MODEL, input: [{ type: 'item_reference', id: 'x' }] }), 'item_reference');
  await expectError('tool_choice none keeps tools out', 200, async () => {
    const r = await oa.responses.create({ model: MODEL, input: 'x', tools: rTools, tool_choice: 'none' });
    check(r.output_text === WHOLE && r.usage.input_tokens === await refCount([{ role: 'user', content: 'x' }]),
          'tool_choice none: no tools in the prompt, no calls parsed', r.output);
    throw Object.assign(new Error('ok'), { status: 200 });
  });
  const raw = await fetch(`${base}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[1]' });
  check(raw.status === 400 && (await raw.json()).error.message.includes('JSON object'), 'a non-object body: 400');
  const get = await fetch(`${base}/v1/responses`, { method: 'GET' });
  check(get.status === 405, 'GET /v1/responses: 405', get.status);
  await expectError('unknown content part field', 400, () => oa.responses.create({ model: MODEL,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'x', frobnicate: 1 }] }] }), 'frobnicate');
  await expectError('unknown tool_choice field', 400, () => oa.responses.create({ model: MODEL, input: 'x', tools: rTools,
    tool_choice: { type: 'function', name: 'get_weather', frobnicate: 1 } }), 'frobnicate');
  const pc = await oa.responses.create({ model: MODEL, input: 'hi', prompt_cache_retention: '24h', prompt_cache_options: {} });
  check(pc.output_text === WHOLE, 'prompt_cache_retention / prompt_cache_options are metadata', pc.output_text);
  const bp = await oa.responses.inputTokens.count({ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text',
    text: 'hi', prompt_cache_breakpoint: { mode: 'explicit' } }] }] });
  const plainCount = await oa.responses.inputTokens.count({ model: MODEL, input: 'hi' });
  check(bp.input_tokens === plainCount.input_tokens, 'prompt_cache_breakpoint is metadata', [bp, plainCount]);
  await expectError('a function tool with output_schema', 400, () => oa.responses.create({ model: MODEL, input: 'x',
    tools: [{ ...rTools[0], output_schema: { type: 'object' } }] }), 'output_schema');
});

await section('responses: the store is bounded', async () => {
  const first = await oa.responses.create({ model: MODEL, input: 'first', max_output_tokens: 1 });
  for (let i = 0; i < 128; i++) await oa.responses.create({ model: MODEL, input: `n${i}`, max_output_tokens: 1 });
  await expectError('evicted previous_response_id', 404, () => oa.responses.create({ model: MODEL, input: 'x', previous_response_id: first.id }));
});

// ================= Anthropic Messages API =================

await section('messages: create, tool use round trip, count_tokens', async () => {
  const m = await an.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }], system: 'Be brief.' });
  check(m.type === 'message' && m.role === 'assistant' && m.id.startsWith('msg_'), 'message', m);
  check(m.content.length === 1 && m.content[0].type === 'text' && m.content[0].text === WHOLE, 'text block', m.content);
  check(m.stop_reason === 'end_turn' && m.stop_sequence === null, 'end_turn', m.stop_reason);
  const want = await refCount([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }]);
  check(m.usage.input_tokens + m.usage.cache_read_input_tokens === want, 'input tokens = the reference', [m.usage, want]);
  check(m.usage.output_tokens === 4, 'output_tokens', m.usage);
  const t = await an.messages.create({ model: MODEL, max_tokens: 64, tools: aTools, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  check(t.stop_reason === 'tool_use', 'stop_reason tool_use', t.stop_reason);
  check(t.content.length === 2 && t.content[0].text === chain.text, 'text then tool_use', t.content);
  const tu = t.content[1];
  check(tu.type === 'tool_use' && tu.name === 'get_weather' && tu.input.city === 'Paris' && /^toolu_/.test(tu.id), 'tool_use block', tu);
  const follow = [{ role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content: t.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'sunny, 21 C' }] }];
  const t2 = await an.messages.create({ model: MODEL, max_tokens: 64, tools: aTools, messages: follow });
  const want2 = await refCount([{ role: 'user', content: 'Weather in Paris?' }, assistantCall, { role: 'tool', content: 'sunny, 21 C' }], { tools: chatTools });
  check(t2.usage.input_tokens + t2.usage.cache_read_input_tokens === want2, 'round trip prompt = the reference', [t2.usage, want2]);
  const ct = await an.messages.countTokens({ model: MODEL, tools: aTools, messages: follow });
  check(ct.input_tokens === want2, 'count_tokens', [ct, want2]);
  const pre = await an.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'Sure' }] });
  check(pre.input_tokens === await refCount([{ role: 'user', content: 'hi' }], { prefill: 'Sure' }), 'assistant prefill', pre);
});

await section('messages: thinking, stop_sequences, max_tokens', async () => {
  const m = await an.messages.create({ model: MODEL, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'hi' }] });
  check(m.content[0].type === 'thinking' && m.content[0].thinking === chain.reasoning, 'thinking block', m.content);
  const tm = await an.messages.create({ model: MODEL, max_tokens: 2048, tools: aTools, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'hi' }] });
  const tuse = tm.content.find((b) => b.type === 'tool_use');
  const back = await an.messages.countTokens({ model: MODEL, tools: aTools, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: tm.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: tuse.id, content: [{ type: 'text', text: 'sunny' }] }] }] });
  const wantT = await refCount([{ role: 'user', content: 'hi' }, { ...assistantCall, reasoning_content: chain.reasoning },
    { role: 'tool', content: 'sunny' }], { tools: chatTools, think: true });
  check(back.input_tokens === wantT, 'thinking blocks go back as the reasoning', [back, wantT]);
  const s = await an.messages.create({ model: MODEL, max_tokens: 64, stop_sequences: ['zzz', 'look'], messages: [{ role: 'user', content: 'hi' }] });
  check(s.stop_reason === 'stop_sequence' && s.stop_sequence === 'look', 'stop_sequence', [s.stop_reason, s.stop_sequence]);
  check(s.content[0].text === chain.text.slice(0, chain.text.indexOf('look')), 'text before the stop sequence', s.content);
  const l = await an.messages.create({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
  check(l.stop_reason === 'max_tokens' && l.content[0].text === chain.text, 'max_tokens', l);
});

await section('messages: thinking budget_tokens', async () => {
  // The chain's reasoning is one token, under a budget of 1024: intact, and the answer follows.
  const m = await an.messages.create({ model: MODEL, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'hi' }] });
  check(m.content.length === 2 && m.content[0].thinking === chain.reasoning && m.content[1].text === WHOLE &&
    m.stop_reason === 'end_turn', 'budget 1024: the reasoning intact, then the text', m);
  // A prefill of LOOP inside <think> reasons LOOP LOOP ... forever; a budget of N (the server runs with
  // Q35_TEST_MIN_THINK_BUDGET=2) cuts it after exactly N tokens with </think>, and the chain then goes
  // </think> \n\n TEXT <tool_call> CALL </tool_call> <|im_end|>: N + 6 output tokens.
  for (const n of [2, 5]) {
    const c = await an.messages.create({ model: MODEL, max_tokens: 64, thinking: { type: 'enabled', budget_tokens: n },
      messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: chain.loop }] });
    const th = c.content.find((b) => b.type === 'thinking'), tx = c.content.find((b) => b.type === 'text');
    check(th && th.thinking.trim() === chain.loop.repeat(n).trim(), `budget ${n}: the reasoning cut after ${n} tokens`, c.content);
    check(tx && tx.text === WHOLE && c.stop_reason === 'end_turn', `budget ${n}: the answer text follows`, c);
    check(c.usage.output_tokens === n + 6, `budget ${n}: output tokens`, c.usage);
  }
  await expectError('budget_tokens under the smallest', 400, () => an.messages.create({ model: MODEL, max_tokens: 64,
    thinking: { type: 'enabled', budget_tokens: 1 }, messages: [{ role: 'user', content: 'x' }] }), 'budget_tokens');
});

await section('messages: streaming', async () => {
  const req = { model: MODEL, max_tokens: 2048, tools: aTools, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'hi' }] };
  const plain = await an.messages.create(req);
  const stream = an.messages.stream(req);
  const types = [];
  let text = '';
  stream.on('text', (d) => { text += d; });
  for await (const ev of stream) types.push(ev.type + (ev.delta && ev.delta.type ? ':' + ev.delta.type : ''));
  const fin = await stream.finalMessage();
  const want = ['message_start', 'content_block_start', 'content_block_delta:thinking_delta', 'content_block_stop',
    'content_block_start', 'content_block_delta:text_delta', 'content_block_stop', 'content_block_start',
    'content_block_delta:input_json_delta', 'content_block_stop', 'message_delta', 'message_stop'];
  check(JSON.stringify(types) === JSON.stringify(want), 'event sequence', types);
  check(text === chain.text, 'text deltas', text);
  const strip = (c) => c.map(({ id, ...rest }) => rest);
  check(JSON.stringify(strip(fin.content)) === JSON.stringify(strip(plain.content)), 'streamed = non-streamed', [fin.content, plain.content]);
  check(fin.stop_reason === 'tool_use' && fin.usage.output_tokens === plain.usage.output_tokens, 'message_delta', fin);
  const raw = await fetch(`${base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...req, stream: true }) }).then((r) => r.text());
  check(raw.includes('event: ping\n'), 'a ping event');
});

await section('messages: errors', async () => {
  const img = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } };
  const e = await expectError('image block', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: [img] }] }), 'vision');
  check(e && e.error && e.error.type === 'error' && e.error.error.type === 'invalid_request_error', 'Anthropic error shape', e && e.error);
  check(e instanceof Anthropic.BadRequestError, 'BadRequestError');
  await expectError('no max_tokens', 400, () => an.messages.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }), 'max_tokens');
  await expectError('tool_choice of an unknown type', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, tools: aTools, tool_choice: { type: 'sometimes' }, messages: [{ role: 'user', content: 'x' }] }), 'tool_choice');
  await expectError('server tool', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, tools: [{ type: 'web_search_20250305', name: 'web_search' }], messages: [{ role: 'user', content: 'x' }] }), 'web_search');
  await expectError('unknown field', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, frob: 1, messages: [{ role: 'user', content: 'x' }] }), 'frob');
  await expectError('temperature above 1', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, temperature: 1.5, messages: [{ role: 'user', content: 'x' }] }), 'temperature');
  await expectError('no messages', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, messages: [] }), 'messages');
  await expectError('bad role', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'system', content: 'x' }] }), 'role');
  await expectError('thinking budget >= max_tokens', 400, () => an.messages.create({ model: MODEL, max_tokens: 1024, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'x' }] }), 'budget_tokens');
  await expectError('wrong model', 400, () => an.messages.create({ model: 'claude-x', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }), 'claude-x');
  // nested fields: refused by name unless they are documented metadata
  const u = (content) => [{ role: 'user', content }];
  await expectError('unknown text block field', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    messages: u([{ type: 'text', text: 'x', frobnicate: 1 }]) }), 'frobnicate');
  await expectError('unknown message field', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    messages: [{ role: 'user', content: 'x', frobnicate: 1 }] }), 'frobnicate');
  await expectError('unknown system block field', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    system: [{ type: 'text', text: 's', frobnicate: 1 }], messages: u('x') }), 'system');
  await expectError('tool input_examples', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    tools: [{ ...aTools[0], input_examples: [{ city: 'Paris' }] }], messages: u('x') }), 'input_examples');
  await expectError('tool defer_loading', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    tools: [{ ...aTools[0], defer_loading: true }], messages: u('x') }), 'defer_loading');
  await expectError('unknown tool_choice field', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, tools: aTools,
    tool_choice: { type: 'auto', frobnicate: 1 }, messages: u('x') }), 'frobnicate');
  await expectError('thinking display omitted', 400, () => an.messages.create({ model: MODEL, max_tokens: 2048,
    thinking: { type: 'enabled', budget_tokens: 1024, display: 'omitted' }, messages: u('x') }), 'display');
  await expectError('output_config effort', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    output_config: { effort: 'low' }, messages: u('x') }), 'effort');
  await expectError('output_config format of another type', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    output_config: { format: { type: 'yaml' } }, messages: u('x') }), 'output_config.format');
  await expectError('a tool_use caller other than direct', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1',
      name: 'get_weather', input: {}, caller: { type: 'code_execution_20250825', tool_id: 'x' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] }], tools: aTools }), 'caller');
  await expectError('unknown field in count_tokens', 400, () => an.messages.countTokens({ model: MODEL, messages: u('x'),
    frobnicate: 1 }), 'frobnicate');
  const meta = await an.messages.create({ model: MODEL, max_tokens: 64, cache_control: { type: 'ephemeral' },
    system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral', ttl: '1h' } }],
    tools: [{ ...aTools[0], cache_control: { type: 'ephemeral' }, eager_input_streaming: true }],
    messages: u([{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' }, citations: null }]) });
  const plainMeta = await an.messages.countTokens({ model: MODEL, system: 'Be brief.', tools: aTools, messages: u('hi') });
  check(meta.usage.input_tokens + meta.usage.cache_read_input_tokens === plainMeta.input_tokens,
        'cache_control, citations, eager_input_streaming are metadata', [meta.usage, plainMeta]);
  const nf = await fetch(`${base}/v1/messages`, { method: 'GET' });
  const nj = await nf.json();
  check(nf.status === 405 && nj.type === 'error', 'GET /v1/messages: 405 in Anthropic shape', nj);
  const r = await fetch(`${base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{bad' });
  const j = await r.json();
  check(r.status === 400 && j.type === 'error' && j.error.type === 'invalid_request_error', 'malformed JSON: Anthropic shape', j);
});

await section('messages: prefill, sampling parameters, a client that goes away', async () => {
  // after a prefill the chain model's reply is free text: greedy decoding here must equal greedy
  // /v1/completions on the reference rendering of the same conversation
  const conv = [{ role: 'user', content: 'hi' }];
  const m = await an.messages.create({ model: MODEL, max_tokens: 24, temperature: 0,
    messages: [...conv, { role: 'assistant', content: 'Sure' }] });
  const prompt = new Template(template).render({ messages: conv, add_generation_prompt: true, bos_token: '',
    eos_token: '<|im_end|>', enable_thinking: false }) + 'Sure';
  const c = await oa.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0 });
  check(m.content[0].text === c.choices[0].text, 'prefill: greedy = greedy completions', [m.content[0].text, c.choices[0].text]);
  check(m.stop_reason === (c.choices[0].finish_reason === 'length' ? 'max_tokens' : 'end_turn'), 'stop_reason', m.stop_reason);
  const k1 = await an.messages.create({ model: MODEL, max_tokens: 24, top_k: 1, messages: [...conv, { role: 'assistant', content: 'Sure' }] });
  check(k1.content[0].text === m.content[0].text, 'top_k 1 = greedy', k1.content[0].text);
  // a prefill ending in LOOP repeats it up to max_tokens: streamed = non-streamed, then a client
  // that drops such a stream cancels its job
  const loopReq = { model: MODEL, max_tokens: 300, messages: [...conv, { role: 'assistant', content: 'Say it' + chain.loop }] };
  const lp = await an.messages.create(loopReq);
  check(lp.stop_reason === 'max_tokens' && lp.usage.output_tokens === 300 && lp.content[0].text === chain.loop.repeat(300),
        'LOOP up to max_tokens', [lp.stop_reason, lp.usage]);
  // the context (2048) fills before max_tokens: stop_reason model_context_window_exceeded, not max_tokens
  const nearFull = [{ role: 'user', content: 'lorem ipsum dolor '.repeat(240) }, { role: 'assistant', content: 'Say it' + chain.loop }];
  const full = await an.messages.create({ model: MODEL, max_tokens: 100000, messages: nearFull });
  const used = full.usage.input_tokens + full.usage.cache_read_input_tokens + full.usage.output_tokens;
  check(full.stop_reason === 'model_context_window_exceeded' && used === 2048 && full.usage.output_tokens > 0,
        'the context fills first: model_context_window_exceeded', [full.stop_reason, full.usage]);
  const ls = await an.messages.stream(loopReq).finalMessage();
  check(ls.content[0].text === lp.content[0].text && ls.stop_reason === 'max_tokens', 'streamed LOOP', ls.stop_reason);
  const metric = async () => Number((await (await fetch(`${base}/metrics`)).text()).match(/q35_requests_cancelled_total (\d+)/)[1]);
  const before = await metric();
  const ac = new AbortController();
  const stream = an.messages.stream({ ...loopReq, max_tokens: 2000 }, { signal: ac.signal });
  try {
    for await (const ev of stream) if (ev.type === 'content_block_delta') ac.abort();
  } catch { /* aborted */ }
  let after = before;
  for (let i = 0; i < 50 && after === before; i++) { await new Promise((r) => setTimeout(r, 100)); after = await metric(); }
  check(after === before + 1, 'a dropped stream cancels its job', [before, after]);
  const h = await fetch(`${base}/health`);
  check(h.status === 200, 'the server is fine afterwards');
});

await section('all three APIs at once, sessions', async () => {
  // more requests than --parallel: they share the batch and the queue; each gets its own reply
  const jobs = [];
  for (let i = 0; i < 3; i++) {
    jobs.push(oa.responses.create({ model: MODEL, input: `r${i}`, tools: rTools }).then((r) => r.output[1].name === 'get_weather' && r.output_text === chain.text));
    jobs.push(an.messages.stream({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: `m${i}` }] }).finalMessage().then((m) => m.content[0].text === WHOLE));
    jobs.push(oa.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `c${i}` }] }).then((c) => c.choices[0].message.content === WHOLE));
  }
  const ok = await Promise.all(jobs);
  check(ok.every((x) => x), 'concurrent replies', ok);
  const h = { headers: { session_id: 'api-conv' } };
  const a1 = await oa.responses.create({ model: MODEL, input: 'session one' }, h);
  const a2 = await oa.responses.create({ model: MODEL, previous_response_id: a1.id, input: 'and two' }, h);
  check(a2.usage.input_tokens_details.cached_tokens > 0, 'a named session reuses its prefix', a2.usage);
  await expectError('a session id that is too long', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    messages: [{ role: 'user', content: 'x' }] }, { headers: { session_id: 'x'.repeat(200) } }), 'session');
});

// ================= the openai client's chat helpers =================

await section('openai chat helpers: stream, runTools, parse', async () => {
  const msgs = [{ role: 'user', content: 'Weather in Paris?' }];
  const st = oa.chat.completions.stream({ model: MODEL, messages: msgs, tools: chatTools });
  let content = '', argsDone = null;
  st.on('content.delta', (e) => { content += e.delta; });
  st.on('tool_calls.function.arguments.done', (e) => { argsDone = e; });
  const fin = await st.finalChatCompletion();
  const m = fin.choices[0].message;
  check(content === chain.text && m.content === chain.text, 'stream helper: content deltas and the final message', [content, m]);
  check(m.tool_calls && m.tool_calls.length === 1 && m.tool_calls[0].function.name === 'get_weather' &&
        JSON.parse(m.tool_calls[0].function.arguments).city === 'Paris', 'stream helper: the tool call', m.tool_calls);
  check(argsDone && argsDone.name === 'get_weather', 'stream helper: tool_calls.function.arguments.done', argsDone);
  check(fin.choices[0].finish_reason === 'tool_calls', 'stream helper: finish_reason', fin.choices[0].finish_reason);
  // tool-call ids: call_ + 24 hex digits, never repeated across responses (streamed or not)
  const again = await oa.chat.completions.create({ model: MODEL, messages: msgs, tools: chatTools });
  const ids = [m.tool_calls[0].id, again.choices[0].message.tool_calls[0].id];
  check(ids.every((x) => /^call_[0-9a-f]{24}$/.test(x)) && ids[0] !== ids[1], 'tool-call ids unique across responses', ids);
  // runTools: the client calls the function and sends its result back (two completions here)
  let got = null;
  const runner = oa.chat.completions.runTools({ model: MODEL, messages: msgs, tools: [{ type: 'function', function: {
    name: 'get_weather', description: 'Weather of a city', parameters: weatherParams, parse: JSON.parse,
    function: (a) => { got = a.city; return 'sunny'; } } }] }, { maxChatCompletions: 2 });
  const done = await runner.finalChatCompletion().catch((e) => e);
  check(got === 'Paris', 'runTools ran the function with the parsed arguments', got);
  const sent = runner.messages.find((x) => x.role === 'tool');
  check(sent && sent.content === 'sunny' && sent.tool_call_id && sent.tool_call_id.startsWith('call_'),
        'runTools sent the result for the call id', runner.messages);
  check(!(done instanceof Error) && done.choices.length === 1, 'runTools completed (two completions)', String(done));
  // parse: a json_schema response_format parsed by the client (the output is constrained)
  const schema = { type: 'object', properties: { color: { enum: ['red', 'green'] } }, required: ['color'],
    additionalProperties: false };
  const pr = await oa.chat.completions.parse({ model: MODEL, messages: [{ role: 'user', content: 'pick' }], max_tokens: 64,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema } } });
  const parsed = pr.choices[0].message.parsed;
  check(parsed && ['red', 'green'].includes(parsed.color) && Object.keys(parsed).length === 1, 'parse: the parsed object',
        pr.choices[0].message);
});

await section('messages: the SDK\'s beta tool runner; thread refused in the shape its fallback reads', async () => {
  // the runner asks for a server-held thread first; the refusal's error.details make it go on
  // without one, sending the whole conversation each turn
  const cities = [];
  const weather = betaZodTool({ name: 'get_weather', description: 'Weather of a city', inputSchema: z.object({ city: z.string() }),
    run: async ({ city }) => { cities.push(city); return 'sunny, 21 C'; } });
  const runner = an.beta.messages.toolRunner({ model: MODEL, max_tokens: 64, tools: [weather], max_iterations: 2,
    messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const replies = [];
  for await (const m of runner) replies.push(m.content.map((b) => b.type).join());
  check(replies.length === 2 && replies.every((x) => x === 'text,tool_use'), 'two turns, each text + tool_use', replies);
  check(cities.length === 2 && cities.every((c) => c === 'Paris'), 'the tool ran with the parsed input each turn', cities);
  const sent = runner.params.messages;
  check(sent.length === 5 && sent[2].role === 'user' && sent[2].content[0].type === 'tool_result',
        'the results went back as tool_result turns', sent.map((m) => m.role));
  const t = await expectError('thread create', 400, () => an.beta.messages.create({ model: MODEL, max_tokens: 8,
    thread: { type: 'create' }, messages: [{ role: 'user', content: 'x' }] }), 'thread: false');
  check(t && t.error && t.error.error && t.error.error.details && t.error.error.details.error_code === 'thread_unsupported_request',
        'thread: error.details.error_code thread_unsupported_request', t && t.error);
});

// ================= across the APIs =================

await section('legacy functions end to end; tool-call ids unique across the three APIs', async () => {
  const msgs = [{ role: 'user', content: 'Weather in Paris?' }];
  const functions = [chatTools[0].function];
  // legacy functions: the answer is message.function_call and finish_reason "function_call", streamed as delta.function_call
  const f = await oa.chat.completions.create({ model: MODEL, messages: msgs, functions });
  const fm = f.choices[0].message;
  check(fm.content === chain.text && fm.function_call && fm.function_call.name === 'get_weather' &&
        JSON.parse(fm.function_call.arguments).city === 'Paris' && !fm.tool_calls, 'functions: message.function_call', fm);
  check(f.choices[0].finish_reason === 'function_call', 'functions: finish_reason function_call', f.choices[0].finish_reason);
  let fname = '', fargs = '', ffinish = null;
  for await (const ch of await oa.chat.completions.create({ model: MODEL, messages: msgs, functions, stream: true }))
    for (const c of ch.choices) {
      if (c.delta.function_call) { fname += c.delta.function_call.name || ''; fargs += c.delta.function_call.arguments || ''; }
      if (c.finish_reason) ffinish = c.finish_reason;
    }
  check(fname === 'get_weather' && JSON.parse(fargs).city === 'Paris' && ffinish === 'function_call',
        'functions streamed: delta.function_call, finish_reason function_call', [fname, fargs, ffinish]);
  // ids: every call of every API in this server's lifetime is different (streamed or not)
  const ids = [];
  for (let i = 0; i < 2; i++) {
    ids.push((await oa.chat.completions.create({ model: MODEL, messages: msgs, tools: chatTools })).choices[0].message.tool_calls[0].id);
    for await (const ch of await oa.chat.completions.create({ model: MODEL, messages: msgs, tools: chatTools, stream: true }))
      for (const c of ch.choices) for (const t of c.delta.tool_calls || []) if (t.id) ids.push(t.id);
    ids.push((await oa.responses.create({ model: MODEL, input: 'x', tools: rTools })).output[1].call_id);
    ids.push((await oa.responses.stream({ model: MODEL, input: 'x', tools: rTools }).finalResponse()).output[1].call_id);
    ids.push((await an.messages.create({ model: MODEL, max_tokens: 64, tools: aTools, messages: msgs })).content[1].id);
    ids.push((await an.messages.stream({ model: MODEL, max_tokens: 64, tools: aTools, messages: msgs }).finalMessage()).content[1].id);
  }
  check(ids.length === 12 && new Set(ids).size === 12, 'tool-call ids: 12 calls, 12 different ids', ids);
  check(ids.every((x) => /^(call_[0-9a-f]{16,24}|toolu_[0-9a-f]{16})$/.test(x)), 'id formats', ids);
});

await section('a prompt past the context: each API\'s error; the counting endpoints still count', async () => {
  // the server runs with --ctx 2048
  const long = 'lorem ipsum dolor '.repeat(800);
  const want = await refCount([{ role: 'user', content: long }]);
  check(want > 2048, 'the reference prompt is longer than the context', want);
  const c = await an.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: long }] });
  check(c.input_tokens === want, 'count_tokens counts past the context', [c, want]);
  const r = await oa.responses.inputTokens.count({ model: MODEL, input: long });
  check(r.input_tokens === want, 'responses input_tokens counts past the context', [r, want]);
  const m = await expectError('messages: prompt too long', 400, () => an.messages.create({ model: MODEL, max_tokens: 8,
    messages: [{ role: 'user', content: long }] }), `prompt is too long: ${want} tokens`);
  check(m instanceof Anthropic.BadRequestError && m.error && m.error.type === 'error' &&
        m.error.error.type === 'invalid_request_error', 'messages: Anthropic\'s error shape', m && m.error);
  const rr = await expectError('responses: prompt too long', 400, () => oa.responses.create({ model: MODEL, input: long }));
  check(rr && rr.code === 'context_length_exceeded', 'responses: code context_length_exceeded', rr && rr.error);
  const cc = await expectError('chat: prompt too long', 400, () => oa.chat.completions.create({ model: MODEL,
    messages: [{ role: 'user', content: long }] }));
  check(cc && cc.code === 'context_length_exceeded' && cc.param === 'messages', 'chat: code context_length_exceeded',
        cc && cc.error);
});

await section('errors under /v1/messages are Anthropic\'s shape (count_tokens, unknown paths, methods)', async () => {
  const shape = (e, type) => e && e.error && e.error.type === 'error' && e.error.error && e.error.error.type === type;
  const u = await expectError('count_tokens: unknown field', 400, () => an.messages.countTokens({ model: MODEL,
    messages: [{ role: 'user', content: 'x' }], frobnicate: 1 }), 'frobnicate');
  check(u instanceof Anthropic.BadRequestError && shape(u, 'invalid_request_error'), 'count_tokens 400: Anthropic shape', u && u.error);
  const nm = await expectError('count_tokens: no messages', 400, () => an.messages.countTokens({ model: MODEL, messages: [] }),
    'messages');
  check(shape(nm, 'invalid_request_error'), 'count_tokens: no messages, Anthropic shape', nm && nm.error);
  const img = await expectError('count_tokens: an image', 400, () => an.messages.countTokens({ model: MODEL, messages: [{ role: 'user',
    content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }), 'vision');
  check(shape(img, 'invalid_request_error'), 'count_tokens: an image, Anthropic shape', img && img.error);
  const doc = await expectError('a document block', 400, () => an.messages.create({ model: MODEL, max_tokens: 8, messages: [{
    role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } }] }] }),
  'document block');
  check(doc && /text block/.test(doc.message) && !/vision/.test(doc.message), 'a document: says what to send instead', doc && doc.message);
  const b = await expectError('an endpoint this server lacks', 404, () => an.messages.batches.list());
  check(b instanceof Anthropic.NotFoundError && shape(b, 'not_found_error'), 'unknown /v1/messages path: 404, Anthropic shape',
        b && b.error);
  const g = await fetch(`${base}/v1/messages/count_tokens`);
  const gj = await g.json();
  check(g.status === 405 && gj.type === 'error' && gj.error.type === 'invalid_request_error', 'GET count_tokens: 405, Anthropic shape', gj);
  // the Anthropic SDK's models.list / retrieve read Anthropic's fields (type, display_name, created_at)
  const ml = [];
  for await (const m of an.models.list()) ml.push(m);
  const mr = await an.models.retrieve(MODEL);
  check(ml.length === 1 && ml[0].type === 'model' && ml[0].id === 'chain.gguf' && ml[0].display_name === 'chain.gguf' &&
        !Number.isNaN(Date.parse(ml[0].created_at)) && mr.id === ml[0].id && mr.type === 'model', 'anthropic models', [ml, mr]);
  // fields the API declares nullable that this server refuses: null is "not given"
  const n = await an.messages.create({ model: MODEL, max_tokens: 64, container: null, inference_geo: null, speed: null, thread: null,
    messages: [{ role: 'user', content: 'hi' }] });
  check(n.content[0].text === WHOLE, 'container / inference_geo / speed null are absent', n.content);
  const rn = await oa.responses.create({ model: MODEL, input: 'hi', conversation: null, prompt: null });
  check(rn.output_text === WHOLE, 'responses conversation / prompt null are absent', rn.output_text);
});

// ================= completions: suffix (this vocabulary has Qwen's FIM tokens) =================

await section('completions: suffix is fill in the middle', async () => {
  const prompt = 'def add(a, b):', suffix = '\n    return c';
  const fim = `<|fim_prefix|>${prompt}<|fim_suffix|>${suffix}<|fim_middle|>`;
  const want = (await hfTok.encode(fim, null, { addSpecialTokens: false })).getIds().length;
  const r = await oa.completions.create({ model: MODEL, prompt, suffix, max_tokens: 6, temperature: 0 });
  check(r.usage.prompt_tokens === want, 'the prompt is Qwen\'s FIM layout (HF tokenizers count)', [r.usage.prompt_tokens, want]);
  const raw = await oa.completions.create({ model: MODEL, prompt: fim, max_tokens: 6, temperature: 0 });
  check(r.choices[0].text === raw.choices[0].text, 'greedy text = the FIM layout sent as the prompt', [r.choices[0].text, raw.choices[0].text]);
  await expectError('suffix with a token-id prompt', 400, () => oa.completions.create({ model: MODEL, prompt: [5, 6], suffix }), 'suffix');
});

// ================= Vercel AI SDK on chat completions =================

await section('ai sdk: generateText, streamText, tool calls', async () => {
  const provider = createOpenAICompatible({ name: 'q35', baseURL: `${base}/v1`, apiKey: 'none' });
  const model = provider.chatModel(MODEL);
  const g = await generateText({ model, prompt: 'hi', maxRetries: 0 });
  check(g.text === WHOLE, 'generateText', g.text);
  check(g.usage.inputTokens === await refCount([{ role: 'user', content: 'hi' }]), 'usage.inputTokens', g.usage);
  const s = streamText({ model, prompt: 'hi', maxRetries: 0 });
  let text = '';
  for await (const d of s.textStream) text += d;
  check(text === WHOLE, 'streamText', text);
  let called = null;
  const weather = tool({ description: 'Weather of a city', inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => { called = city; return 'sunny'; } });
  const t = await generateText({ model, prompt: 'Weather in Paris?', tools: { get_weather: weather }, stopWhen: stepCountIs(2), maxRetries: 0 });
  check(called === 'Paris', 'the tool ran with the parsed arguments', called);
  check(t.steps.length === 2 && t.steps[0].toolCalls[0].toolName === 'get_weather', 'two steps: call, then the answer', t.steps.length);
  check(t.steps[0].finishReason === 'tool-calls', 'finish reason tool-calls', t.steps[0].finishReason);
  const st = streamText({ model, prompt: 'Weather?', tools: { get_weather: tool({ inputSchema: z.object({ city: z.string() }) }) }, maxRetries: 0 });
  const calls = await st.toolCalls;
  check(calls.length === 1 && calls[0].input.city === 'Paris', 'streamed tool call', calls);
});

console.error(`${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
