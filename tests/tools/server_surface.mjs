// server_surface.mjs - the request surface of `q35 serve` with the official OpenAI client (npm
// `openai`): every field is honoured or refused by name (issue 17's table), never ignored.
// Env: Q35_URL, Q35 (binary), Q35_MODEL, Q35_CTX, Q35_MAX_BODY. Exit status 0 = every check passed.
// References are independent of the server's own numbers: `q35 tokenize` on the model file for
// prompt lengths, the request's own text for echo, the rules OpenAI documents for logit_bias
// (-100 bans, +100 forces), stop strings and text-keyed legacy logprobs.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import OpenAI from 'openai';

const base = process.env.Q35_URL;
const Q35 = process.env.Q35;
const modelPath = process.env.Q35_MODEL;
const ctx = Number(process.env.Q35_CTX);
const maxBody = Number(process.env.Q35_MAX_BODY);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const modelId = path.basename(modelPath);

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
// A refusal: the error class and status, the offending field in `param`, and (optionally) words
// the message must hold.
async function refused(what, fn, param, re, cls = OpenAI.BadRequestError, status = 400) {
  try {
    await fn();
    check(false, `${what}: accepted, want a ${status} naming '${param}'`);
  } catch (e) {
    check(e instanceof cls && e.status === status, `${what}: ${e && e.constructor && e.constructor.name} ${e.status}`,
          e && e.message);
    if (param) check(e.param === param, `${what}: param ${e.param}, want ${param}`, e.message);
    if (re) check(re.test(e.message), `${what}: message ${re}`, e.message);
  }
}
const q35Tokens = (text) =>
  execFileSync(Q35, ['tokenize', '-m', modelPath, '--text', text], { encoding: 'utf8' }).trim().split(/\s+/)
    .filter((s) => s.length).map(Number);
const msgs = [{ role: 'user', content: 'what is the weather in Paris?' }];
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'the weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const chat = (extra) => () => client.chat.completions.create({ model: modelId, messages: msgs, max_tokens: 2, ...extra });
const text = (extra) => () => client.completions.create({ model: modelId, prompt: 'once upon a time', max_tokens: 2,
  ...extra });

await section('unknown and refused fields are named', async () => {
  await refused('unknown field', chat({ frobnicate: 1 }), 'frobnicate', /unknown field/);
  await refused('unknown completions field', text({ messages: [] }), 'messages', /unknown field/);
  await refused('audio output', chat({ audio: { voice: 'alloy', format: 'mp3' } }), 'audio', /audio/);
  await refused('modalities audio', chat({ modalities: ['text', 'audio'] }), 'modalities', /audio/);
  await refused('web_search_options', chat({ web_search_options: {} }), 'web_search_options');
  await refused('store true', chat({ store: true }), 'store');
  await refused('verbosity', chat({ verbosity: 'low' }), 'verbosity');
  // documented metadata is accepted and changes nothing
  const a = await chat({ seed: 5, temperature: 1 })();
  const b = await chat({ seed: 5, temperature: 1, user: 'u-1', metadata: { k: 'v' }, store: false,
    service_tier: 'auto', safety_identifier: 'x', prompt_cache_key: 'p', modalities: ['text'] })();
  check(a.choices[0].message.content === b.choices[0].message.content, 'metadata changes nothing',
        [a.choices[0].message, b.choices[0].message]);
  await refused('user not a string', chat({ user: 5 }), 'user');
});

await section('nested fields: each is honoured, documented metadata, or refused by name', async () => {
  const fn = tools[0].function;
  await refused('unknown message field', () => client.chat.completions.create({ model: modelId, max_tokens: 2,
    messages: [{ role: 'user', content: 'hi', frobnicate: 1 }] }), 'messages', /frobnicate/);
  await refused('a tool message field of another role', () => client.chat.completions.create({ model: modelId,
    max_tokens: 2, messages: [{ role: 'user', content: 'hi', tool_call_id: 'x' }] }), 'messages', /tool_call_id/);
  await refused('unknown text part field', () => client.chat.completions.create({ model: modelId, max_tokens: 2,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', frobnicate: 1 }] }] }), 'messages', /frobnicate/);
  await refused('unknown tool_calls field', () => client.chat.completions.create({ model: modelId, max_tokens: 2,
    messages: [msgs[0], { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', frobnicate: 1,
      function: { name: 'get_weather', arguments: '{}' } }] }, { role: 'tool', tool_call_id: 'c', content: 'x' }] }),
  'messages', /frobnicate/);
  await refused('custom tool call in the history', () => client.chat.completions.create({ model: modelId, max_tokens: 2,
    messages: [msgs[0], { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'custom',
      custom: { name: 'x', input: 'y' } }] }] }), 'messages', /custom/);
  await refused('unknown function field', chat({ tools: [{ type: 'function', function: { ...fn, frobnicate: 1 } }] }),
                'tools', /frobnicate/);
  await refused('unknown tool field', chat({ tools: [{ ...tools[0], frobnicate: 1 }] }), 'tools', /frobnicate/);
  await refused('unknown legacy function field', chat({ functions: [{ ...fn, frobnicate: 1 }] }), 'functions', /frobnicate/);
  await refused('unknown named tool_choice field', chat({ tools, tool_choice: { type: 'function',
    function: { name: 'get_weather', frobnicate: 1 } } }), 'tool_choice', /frobnicate/);
  await refused('unknown response_format field', chat({ response_format: { type: 'json_schema', json_schema: {
    name: 'x', schema: { type: 'object' }, frobnicate: 1 } } }), 'response_format', /frobnicate/);
  await refused('unknown stream_options field', chat({ stream_options: { frobnicate: true } }), 'stream_options',
                /frobnicate/);
  await refused('other chat_template_kwargs', chat({ chat_template_kwargs: { add_vision_id: true } }),
                'chat_template_kwargs', /add_vision_id/);
  await refused('prediction of another type', chat({ prediction: { type: 'diff', content: 'x' } }), 'prediction');
  // metadata: accepted, the prompt unchanged
  const plain = await chat({ max_tokens: 1 })();
  for (const [what, extra] of [['prediction', { prediction: { type: 'content', content: 'the weather' } }],
    ['include_obfuscation', { stream_options: { include_obfuscation: false } }]]) {
    const r = await chat({ max_tokens: 1, ...extra })();
    check(r.usage.prompt_tokens === plain.usage.prompt_tokens, `${what} is metadata`);
  }
  const named = await client.chat.completions.create({ model: modelId, max_tokens: 1,
    messages: [{ role: 'user', content: msgs[0].content, name: 'alice' }] });
  check(named.usage.prompt_tokens === plain.usage.prompt_tokens, 'a message name is accepted (not rendered)');
  const cached = await client.chat.completions.create({ model: modelId, max_tokens: 1,
    messages: [{ role: 'user', content: [{ type: 'text', text: msgs[0].content, prompt_cache_breakpoint: { mode: 'explicit' } }] }] });
  check(cached.usage.prompt_tokens === plain.usage.prompt_tokens, 'prompt_cache_breakpoint is metadata');
  // an assistant's refusal is its text: the refusal string, a refusal part and plain content render alike
  const turn = (m) => client.chat.completions.create({ model: modelId, max_tokens: 1,
    messages: [msgs[0], m, { role: 'user', content: 'ok' }] });
  const asText = await turn({ role: 'assistant', content: 'I cannot help with that.' });
  const asField = await turn({ role: 'assistant', content: null, refusal: 'I cannot help with that.' });
  const asPart = await turn({ role: 'assistant', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] });
  check(asField.usage.prompt_tokens === asText.usage.prompt_tokens && asPart.usage.prompt_tokens === asText.usage.prompt_tokens,
        'a refusal renders as the assistant text', [asText.usage.prompt_tokens, asField.usage.prompt_tokens,
          asPart.usage.prompt_tokens]);
});

await section('image and audio parts are refused (no vision/audio encoder)', async () => {
  const img = [{ role: 'user', content: [{ type: 'text', text: 'what is this?' },
    { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }] }];
  await refused('image_url part', () => client.chat.completions.create({ model: modelId, messages: img, max_tokens: 2 }),
                'messages', /vision encoder/);
  const aud = [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }];
  await refused('input_audio part', () => client.chat.completions.create({ model: modelId, messages: aud, max_tokens: 2 }),
                'messages', /audio encoder/);
  // text parts still work, and render as the concatenated text
  const parts = await client.chat.completions.create({ model: modelId, max_tokens: 1,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'what is the weather ' }, { type: 'text', text: 'in Paris?' }] }] });
  const plain = await chat({ max_tokens: 1 })();
  check(parts.usage.prompt_tokens === plain.usage.prompt_tokens, 'text parts == the joined text',
        [parts.usage.prompt_tokens, plain.usage.prompt_tokens]);
});

await section('tool_choice, legacy functions, parallel_tool_calls, strict', async () => {
  const none = await chat({ tools, tool_choice: 'none', max_tokens: 1 })();
  const plain = await chat({ max_tokens: 1 })();
  const auto = await chat({ tools, max_tokens: 1 })();
  check(none.usage.prompt_tokens === plain.usage.prompt_tokens, 'tool_choice none leaves the tools out of the prompt',
        [none.usage.prompt_tokens, plain.usage.prompt_tokens]);
  check(auto.usage.prompt_tokens > plain.usage.prompt_tokens, 'tools are in the prompt otherwise');
  // forced calls are constrained decoding now (test_server_structured checks what they produce)
  const req = await chat({ tools, tool_choice: 'required', max_tokens: 1 })();
  check(req.choices.length === 1, 'tool_choice required is accepted');
  const named = await chat({ tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 1 })();
  check(named.choices.length === 1, 'tool_choice named is accepted');
  await refused('tool_choice unknown name', chat({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
                'tool_choice', /nope/);
  await refused('tool_choice invalid string', chat({ tools, tool_choice: 'sometimes' }), 'tool_choice', /sometimes/);
  await refused('tool_choice required without tools', chat({ tool_choice: 'required' }), 'tool_choice');
  await refused('parallel_tool_calls not a boolean', chat({ tools, parallel_tool_calls: 'no' }), 'parallel_tool_calls');
  const one = await chat({ tools, parallel_tool_calls: false, max_tokens: 1 })();
  check(one.usage.prompt_tokens === auto.usage.prompt_tokens, 'parallel_tool_calls false is accepted');
  const strict = await chat({ tools: [{ ...tools[0], function: { ...tools[0].function, strict: true } }], max_tokens: 1 })();
  check(strict.choices.length === 1, 'strict tools are accepted');
  await refused('a strict tool whose schema does not compile', chat({ tools: [{ ...tools[0], function: {
    ...tools[0].function, strict: true, parameters: { type: 'object', properties: { city: { type: 'string',
      frobnicate: 1 } } } } }] }), 'tools', /frobnicate/);
  await refused('custom tools', chat({ tools: [{ type: 'custom', custom: { name: 'x' } }] }), 'tools');
  // legacy functions render exactly like the same tools
  const legacy = await chat({ functions: [tools[0].function], max_tokens: 1 })();
  check(legacy.usage.prompt_tokens === auto.usage.prompt_tokens, 'functions == tools in the prompt',
        [legacy.usage.prompt_tokens, auto.usage.prompt_tokens]);
  const lnone = await chat({ functions: [tools[0].function], function_call: 'none', max_tokens: 1 })();
  check(lnone.usage.prompt_tokens === plain.usage.prompt_tokens, 'function_call none leaves them out');
  const fnamed = await chat({ functions: [tools[0].function], function_call: { name: 'get_weather' }, max_tokens: 1 })();
  check(fnamed.choices.length === 1, 'function_call named is accepted');
  await refused('tools and functions', chat({ tools, functions: [tools[0].function] }), 'functions');
  // a legacy function result renders as a tool result
  const hist = [msgs[0], { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
    { role: 'function', name: 'get_weather', content: 'sunny' }];
  const histTools = [msgs[0], { role: 'assistant', content: null, tool_calls: [{ id: 'call_x', type: 'function',
    function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] }, { role: 'tool', tool_call_id: 'call_x', content: 'sunny' }];
  const h1 = await client.chat.completions.create({ model: modelId, messages: hist, functions: [tools[0].function], max_tokens: 1 });
  const h2 = await client.chat.completions.create({ model: modelId, messages: histTools, tools, max_tokens: 1 });
  check(h1.usage.prompt_tokens === h2.usage.prompt_tokens, 'function messages == tool messages',
        [h1.usage.prompt_tokens, h2.usage.prompt_tokens]);
});

await section('response_format, grammar and json_schema: accepted, or refused with the compiler message', async () => {
  for (const [what, extra] of [['json_object', { response_format: { type: 'json_object' } }],
    ['json_schema', { response_format: { type: 'json_schema', json_schema: { name: 'x', strict: true,
      schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'], additionalProperties: false } } } }],
    ['llama grammar', { grammar: 'root ::= "a" | "b"' }]]) {
    const r = await chat(extra)();
    check(r.choices.length === 1, `${what} is accepted`);
  }
  const j = await text({ json_schema: { type: 'object' } })();
  check(j.choices.length === 1, 'completions json_schema (llama-server) is accepted');
  await refused('bad response_format type', chat({ response_format: { type: 'yaml' } }), 'response_format', /yaml/);
  await refused('a grammar that does not compile', chat({ grammar: 'root ::= undefined-rule' }), 'grammar',
                /does not compile.*undefined-rule/);
  await refused('a schema keyword q35 lacks', chat({ response_format: { type: 'json_schema', json_schema: { name: 'x',
    schema: { type: 'object', frobnicate: true } } } }), 'response_format', /frobnicate/);
  await refused('a remote $ref', text({ json_schema: { $ref: 'https://example.com/s.json' } }), 'json_schema', /ref/);
  await refused('grammar with response_format', chat({ grammar: 'root ::= "a"', response_format: { type: 'json_object' } }),
                'grammar');
  const t = await chat({ response_format: { type: 'text' } })();
  check(t.choices.length === 1, 'response_format text is plain output');
});

await section('reasoning_effort maps to the thinking toggle', async () => {
  // the server runs with --no-think: effort low turns thinking on, which changes the rendered prompt
  const off = await chat({ max_tokens: 1 })();
  const none = await chat({ max_tokens: 1, reasoning_effort: 'none' })();
  const low = await chat({ max_tokens: 1, reasoning_effort: 'low' })();
  const on = await chat({ max_tokens: 1, chat_template_kwargs: { enable_thinking: true } })();
  check(none.usage.prompt_tokens === off.usage.prompt_tokens, 'effort none == thinking off');
  check(low.usage.prompt_tokens === on.usage.prompt_tokens && low.usage.prompt_tokens !== off.usage.prompt_tokens,
        'effort low == thinking on', [low.usage.prompt_tokens, on.usage.prompt_tokens, off.usage.prompt_tokens]);
  await refused('bad effort', chat({ reasoning_effort: 'extreme' }), 'reasoning_effort');
  await refused('effort against enable_thinking', chat({ reasoning_effort: 'high',
    chat_template_kwargs: { enable_thinking: false } }), 'reasoning_effort');
});

await section('logit_bias: ids checked, -100 bans, +100 forces', async () => {
  await refused('id out of the vocabulary', chat({ logit_bias: { 99999999: 5 } }), 'logit_bias', /99999999/);
  await refused('bias 500', chat({ logit_bias: { 5: 500 } }), 'logit_bias', /-100, 100/);
  await refused('not an id', chat({ logit_bias: { abc: 1 } }), 'logit_bias', /abc/);
  const req = { model: modelId, prompt: 'the cat sat on the', max_tokens: 6, temperature: 0, logprobs: 1 };
  const greedy = await client.completions.create(req);
  const first = q35Tokens(greedy.choices[0].logprobs.tokens[0]);
  check(first.length === 1, 'the first greedy token re-tokenizes to one id', first);
  const banned = await client.completions.create({ ...req, logit_bias: { [first[0]]: -100 } });
  check(banned.choices[0].logprobs.tokens[0] !== greedy.choices[0].logprobs.tokens[0], '-100 bans the greedy token',
        [banned.choices[0].logprobs.tokens, greedy.choices[0].logprobs.tokens]);
  const forced = q35Tokens(' zebra')[0];
  const fr = await client.completions.create({ ...req, temperature: 1, seed: 9, logit_bias: { [forced]: 100 } });
  const forcedText = (await (await fetch(`${base}/detokenize`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ tokens: [forced] }) })).json()).content;
  check(fr.choices[0].logprobs.tokens.every((t) => t === forcedText), '+100 forces the token at every step',
        [fr.choices[0].logprobs.tokens, forcedText]);
  // seeded requests with a bias reproduce
  const r1 = await client.completions.create({ ...req, temperature: 1, seed: 3, logit_bias: { [forced]: 2 } });
  const r2 = await client.completions.create({ ...req, temperature: 1, seed: 3, logit_bias: { [forced]: 2 } });
  check(r1.choices[0].text === r2.choices[0].text, 'same seed and bias, same text');
});

await section('completions: echo, suffix, best_of', async () => {
  const prompt = 'one two three';
  const e = await client.completions.create({ model: modelId, prompt, max_tokens: 4, seed: 2, echo: true });
  const ne = await client.completions.create({ model: modelId, prompt, max_tokens: 4, seed: 2 });
  check(e.choices[0].text === prompt + ne.choices[0].text, 'echo prepends the prompt', [e.choices[0].text, ne.choices[0].text]);
  let streamed = '';
  for await (const ch of await client.completions.create({ model: modelId, prompt, max_tokens: 4, seed: 2, echo: true,
    stream: true })) for (const c of ch.choices) streamed += c.text || '';
  check(streamed === e.choices[0].text, 'streamed echo == non-streamed', [streamed, e.choices[0].text]);
  const ids = q35Tokens(prompt);
  const eid = await client.completions.create({ model: modelId, prompt: ids, max_tokens: 4, seed: 2, echo: true });
  check(eid.choices[0].text === e.choices[0].text, 'echo of a token-id prompt decodes it');
  await refused('echo with logprobs', text({ echo: true, logprobs: 2 }), 'echo', /prompt/);
  await refused('suffix without FIM tokens', text({ suffix: ' the end' }), 'suffix', /fim/i);
  await refused('best_of > n', text({ best_of: 3 }), 'best_of');
  const b1 = await text({ best_of: 1, seed: 4 })();
  check(b1.choices.length === 1, 'best_of == n is plain sampling');
});

await section('GET /v1/models/{id}', async () => {
  const m = await client.models.retrieve(modelId);
  check(m.id === modelId && m.object === 'model', 'retrieve by id', m);
  const stem = await client.models.retrieve(modelId.replace(/\.gguf$/, ''));
  check(stem.id === modelId, 'retrieve by the stem');
  await refused('unknown model id', () => client.models.retrieve('gpt-17'), null, /gpt-17/, OpenAI.NotFoundError, 404);
});

await section('errors: context_length_exceeded, a 413 the client receives', async () => {
  try {
    await client.completions.create({ model: modelId, prompt: 'lorem ipsum '.repeat(ctx) });
    check(false, 'a prompt over the context was accepted');
  } catch (e) {
    check(e.status === 400 && e.code === 'context_length_exceeded', 'code context_length_exceeded', [e.status, e.code]);
  }
  // well over --max-body, through the official client: it must see the 413, not a connection error
  for (const size of [maxBody + 10, maxBody * 20]) {
    try {
      await client.completions.create({ model: modelId, prompt: 'x'.repeat(size), max_tokens: 1 });
      check(false, 'an oversized body was accepted');
    } catch (e) {
      check(e instanceof OpenAI.APIError && e.status === 413, `a ${size}-byte body: the client receives the 413`,
            [e.constructor.name, e.status, e.message]);
    }
  }
  // under /v1/messages the 413 is in Anthropic's shape (its SDK reads error.type)
  const big = await fetch(`${base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: modelId, max_tokens: 1, messages: [{ role: 'user', content: 'x'.repeat(maxBody) }] }) });
  const bj = await big.json();
  check(big.status === 413 && bj.type === 'error' && bj.error.type === 'request_too_large', '/v1/messages 413: Anthropic shape', bj);
  check((await client.models.list()).data.length === 1, 'serves again after the 413s');
});

await section('legacy logprobs: N distinct texts; logprobs cut at a stop', async () => {
  // tokens whose bytes are not UTF-8 on their own all read as U+FFFD: raise two of them to the
  // top, so the text-keyed alternatives must merge them and still list N distinct texts
  const V = (await client.models.retrieve(modelId)).meta.n_vocab;
  const same = [];
  for (let id = 0; id < V && same.length < 2; id += 1) {
    const d = await (await fetch(`${base}/detokenize`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ tokens: [id] }) })).json();
    if (d.content === '\ufffd') same.push(id);
  }
  check(same.length === 2, 'two tokens that read as U+FFFD', same);
  const N = 4;
  const r = await client.completions.create({ model: modelId, prompt: 'abc', max_tokens: 5, temperature: 1, seed: 7,
    logprobs: N, logit_bias: { [same[0]]: 30, [same[1]]: 30 } });
  const tops = r.choices[0].logprobs.top_logprobs;
  check(tops.every((t) => Object.keys(t).length === N), `every position lists ${N} distinct texts`, tops);
  check(tops.every((t) => '\ufffd' in t), 'the merged text is there', tops);
  // stop: generate freely, then stop at a string taken from the middle of that text
  const req = { model: modelId, prompt: 'the rain in spain', max_tokens: 12, temperature: 1, seed: 11, logprobs: 1 };
  const free = await client.completions.create(req);
  const toks = free.choices[0].logprobs.tokens;
  const full = toks.join('');
  check(full === free.choices[0].text, 'tokens join to the text');
  const at = toks.slice(0, 4).join('').length; // the stop starts at token 4's first byte
  const stop = full.slice(at, at + 2);
  if (stop.length === 2 && full.indexOf(stop) === at) {
    const cut = await client.completions.create({ ...req, stop });
    const lp = cut.choices[0].logprobs;
    check(cut.choices[0].text === full.slice(0, at), 'text cut at the stop', [cut.choices[0].text, full.slice(0, at)]);
    check(lp.tokens.length === 4 && lp.tokens.join('') === cut.choices[0].text,
          'logprobs list only the tokens before the stop', [lp.tokens, cut.choices[0].text]);
    check(lp.text_offset.every((o) => o < at), 'offsets inside the text', lp.text_offset);
    // streamed chat: the content logprobs stop at the same place
    const creq = { model: modelId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 12, temperature: 1, seed: 11,
      logprobs: true };
    const cfree = await client.chat.completions.create(creq);
    const ctoks = cfree.choices[0].logprobs.content.map((t) => t.token);
    const cfull = ctoks.join('');
    const cat = ctoks.slice(0, 3).join('').length;
    const cstop = cfull.slice(cat, cat + 2);
    if (cstop.length === 2 && cfull.indexOf(cstop) === cat && cfree.choices[0].message.content === cfull) {
      let content = '';
      const got = [];
      for await (const ch of await client.chat.completions.create({ ...creq, stop: cstop, stream: true }))
        for (const c of ch.choices) {
          content += c.delta.content || '';
          if (c.logprobs && c.logprobs.content) got.push(...c.logprobs.content.map((t) => t.token));
        }
      check(content === cfull.slice(0, cat), 'streamed chat text cut at the stop', [content, cfull.slice(0, cat)]);
      check(got.length === 3 && got.join('') === content, 'streamed chat logprobs cut at the stop', [got, content]);
    } else {
      console.error(`note: chat stop case skipped (${JSON.stringify(cstop)})`);
    }
  } else {
    check(false, 'a usable stop string from the free text', [full, at, stop]);
  }
});

console.error(`${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
