// server_fields.mjs - every top-level request field of the pinned client packages, read from
// their type declarations (openai: ChatCompletionCreateParams, CompletionCreateParams,
// ResponseCreateParams; @anthropic-ai/sdk: MessageCreateParams, MessageCountTokensParams), is
// (1) named in the README's table for its endpoint (implemented, metadata or refused), and
// (2) checked by the running server: sent with a value no field takes ({"q35_probe": 1}: an
// object with a field nobody defines), the request is a 400 naming the field, never a 200 that
// ignored it. A field a new package version adds fails here until it is handled and documented.
// Env: Q35_URL, Q35_MODEL, Q35_SRC. Exit status 0 = every check passed.
import fs from 'node:fs';
import path from 'node:path';

const base = process.env.Q35_URL;
const src = process.env.Q35_SRC;
const modelId = path.basename(process.env.Q35_MODEL);
const nm = path.join(src, 'tests', 'node_modules');

let failures = 0, checks = 0;
function check(cond, what, extra) {
  checks++;
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}${extra !== undefined ? ' ' + JSON.stringify(extra).slice(0, 400) : ''}`);
  }
}

// The property names at the top level of `export interface NAME { ... }` (comments removed);
// nullable: those whose declaration line says `| null`.
function props(file, name, nullable = false) {
  const text = fs.readFileSync(path.join(nm, file), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
  const m = new RegExp(`export interface ${name}\\b[^{]*\\{`).exec(text);
  if (!m) throw new Error(`${file}: no interface ${name}`);
  const out = [];
  let depth = 1;
  for (let i = m.index + m[0].length, line = ''; depth > 0 && i < text.length; i++) {
    const c = text[i];
    if (c === '\n') {
      const p = depth === 1 && /^\s*([A-Za-z_][A-Za-z0-9_]*)\??\s*:(.*)$/.exec(line);
      if (p && (!nullable || /\|\s*null\b/.test(p[2]))) out.push(p[1]);
      line = '';
    } else if (depth === 1) line += c;
    if (c === '{') depth++;
    else if (c === '}') depth--;
  }
  return out;
}

// The README text between a heading that starts with `start` and the next heading of its level.
const readme = fs.readFileSync(path.join(src, 'README.md'), 'utf8');
function section(start) {
  const i = readme.indexOf(start);
  if (i < 0) throw new Error(`README: no section '${start}'`);
  const level = /^#+/.exec(start)[0];
  const rest = readme.slice(i + start.length);
  const j = rest.search(new RegExp(`\\n${level} `));
  return j < 0 ? rest : rest.slice(0, j);
}

const chatMsgs = [{ role: 'user', content: 'hi' }];
const apis = [
  { path: '/v1/chat/completions', file: 'openai/resources/chat/completions/completions.d.ts',
    type: 'ChatCompletionCreateParamsBase', doc: '### Request fields', body: { model: modelId, messages: chatMsgs, max_tokens: 1 } },
  { path: '/v1/completions', file: 'openai/resources/completions.d.ts', type: 'CompletionCreateParamsBase',
    doc: '### Request fields', body: { model: modelId, prompt: 'hi', max_tokens: 1 }, limit: 'max_tokens' },
  { path: '/v1/responses', file: 'openai/resources/responses/responses.d.ts', type: 'ResponseCreateParamsBase',
    doc: '### `POST /v1/responses`', body: { model: modelId, input: 'hi', max_output_tokens: 1 }, limit: 'max_output_tokens' },
  { path: '/v1/messages', file: '@anthropic-ai/sdk/resources/messages/messages.d.ts', type: 'MessageCreateParamsBase',
    doc: '### `POST /v1/messages`', body: { model: modelId, max_tokens: 1, messages: chatMsgs } },
  { path: '/v1/messages/count_tokens', file: '@anthropic-ai/sdk/resources/messages/messages.d.ts',
    type: 'MessageCountTokensParams', doc: '### `POST /v1/messages`', body: { model: modelId, messages: chatMsgs } },
];

for (const api of apis) {
  const fields = props(api.file, api.type);
  check(fields.length >= 10, `${api.type}: fields read from ${api.file}`, fields);
  const doc = section(api.doc);
  let probed = 0;
  for (const f of fields) {
    check(new RegExp('`' + f + '\\b').test(doc), `${api.path}: README's '${api.doc}' names \`${f}\``);
    const body = { ...api.body, [f]: { q35_probe: 1 } };
    const r = await fetch(base + api.path, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body) });
    const j = await r.json().catch(() => null);
    const err = j && j.error; // OpenAI's {error: {message, param}} or Anthropic's {type: error, error: {message}}
    const param = err && err.param;
    const msg = (err && err.message) || '';
    const named = (param && (param === f || param.startsWith(f + '.'))) || msg.includes(`'${f}`);
    check(r.status === 400 && named, `${api.path}: ${f} = {q35_probe: 1} is a 400 naming it`, [r.status, param, msg]);
    probed++;
  }
  // a field declared nullable, sent as null, is "not given" (clients that write every field
  // send null for those they leave unset): never a 400, whether the server implements the field
  // or refuses it when it is set. Left out: the length limit the base body sets (null there means
  // no limit) and the completions prompt (required here).
  // (sent together: they share the server's batch)
  const nullable = props(api.file, api.type, true)
    .filter((f) => f !== api.limit && !(f === 'prompt' && api.path === '/v1/completions'));
  await Promise.all(nullable.map(async (f) => {
    const body = { ...api.body, [f]: null };
    if (f === 'max_tokens' && api.path === '/v1/chat/completions') body.max_completion_tokens = 1;
    const r = await fetch(base + api.path, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body) });
    const t = await r.text();
    check(r.status === 200, `${api.path}: ${f} = null is the same as leaving it out`, [r.status, t.slice(0, 200)]);
  }));
  const nulls = nullable.length;
  console.error(`-- ${api.path}: ${probed} fields of ${api.type}, ${nulls} nullable ones sent as null`);
}

console.error(`${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
