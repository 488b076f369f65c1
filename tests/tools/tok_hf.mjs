// tok_hf.mjs - Hugging Face `tokenizers` (npm) as the reference for the q35 tokenizer tests.
//   node tok_hf.mjs encode TOKENIZER_JSON CORPUS_JSONL     -> {"ids": [...]} per line
//   node tok_hf.mjs decode TOKENIZER_JSON IDS_JSONL        -> {"text": ...} per line (HF decode, lossy)
//   node tok_hf.mjs nfc TOKENIZER_JSON CORPUS_JSONL         -> {"text": NFC(text)} per line, where
//        NFC applies to the stretches between added-token strings (HF splits those out first, so
//        "<think>" + U+0338 stays as is instead of composing ">" + U+0338 into U+226F)
//   node tok_hf.mjs qwen35 TOKENIZER_JSON OUT_JSON          -> the same tokenizer with Qwen3.5's regex
//   node tok_hf.mjs randids TOKENIZER_JSON N SEED           -> N lines {"ids": [...]} of random ids
import { createRequire } from "module";
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "package.json"));
const { Tokenizer } = require("tokenizers");

const QWEN35_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const lines = (f) => fs.readFileSync(f, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
const out = [];
const [mode, a, b, c] = process.argv.slice(2);

if (mode === "encode") {
  const t = Tokenizer.fromFile(a);
  for (const { text } of lines(b)) {
    const e = await t.encode(text, null, { addSpecialTokens: false });
    out.push(JSON.stringify({ ids: Array.from(e.getIds()) }));
  }
} else if (mode === "decode") {
  const t = Tokenizer.fromFile(a);
  for (const { ids } of lines(b)) out.push(JSON.stringify({ text: await t.decode(ids, false) }));
} else if (mode === "nfc") {
  const added = JSON.parse(fs.readFileSync(a, "utf8")).added_tokens.map((x) => x.content);
  for (const { text } of lines(b)) {
    let res = "", seg = 0, i = 0;
    while (i < text.length) {
      let best = "";
      for (const t of added) if (t.length > best.length && text.startsWith(t, i)) best = t;
      if (!best) { i++; continue; }
      res += text.slice(seg, i).normalize("NFC") + best;
      i += best.length;
      seg = i;
    }
    out.push(JSON.stringify({ text: res + text.slice(seg).normalize("NFC") }));
  }
} else if (mode === "qwen35") {
  const j = JSON.parse(fs.readFileSync(a, "utf8"));
  let n = 0;
  for (const p of j.pre_tokenizer.pretokenizers ?? [j.pre_tokenizer])
    if (p.type === "Split") { p.pattern.Regex = QWEN35_RE; n++; }
  if (n !== 1) throw new Error("expected one Split pre-tokenizer");
  fs.writeFileSync(b, JSON.stringify(j));
} else if (mode === "randids") {
  const j = JSON.parse(fs.readFileSync(a, "utf8"));
  const nv = Object.keys(j.model.vocab).length, added = j.added_tokens.map((x) => x.id);
  // Byte tokens that split UTF-8 sequences: single bytes >= 0x80 (ids of the 1-char pieces).
  const byteIds = [];
  for (const [k, v] of Object.entries(j.model.vocab)) if ([...k].length === 1 && k.codePointAt(0) >= 0xa1) byteIds.push(v);
  let s = Number(c) >>> 0 || 1;
  const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
  for (let k = 0; k < Number(b); k++) {
    const n = 1 + Math.floor(rnd() * 30), ids = [];
    for (let i = 0; i < n; i++) {
      const r = rnd();
      if (r < 0.45) ids.push(byteIds[Math.floor(rnd() * byteIds.length)]);
      else if (r < 0.55) ids.push(added[Math.floor(rnd() * added.length)]);
      else ids.push(Math.floor(rnd() * nv));
    }
    out.push(JSON.stringify({ ids }));
  }
} else {
  console.error("usage: tok_hf.mjs encode|decode|nfc|qwen35|randids ...");
  process.exit(2);
}
if (out.length) process.stdout.write(out.join("\n") + "\n");
