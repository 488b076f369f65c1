// tokenizer_bench.mjs - HF tokenizers encode speed on one text file: node tokenizer_bench.mjs TOKENIZER_JSON FILE
import { createRequire } from "module";
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "tests", "package.json"));
const { Tokenizer } = require("tokenizers");
const [tj, file] = process.argv.slice(2);
const text = fs.readFileSync(file, "utf8"), bytes = Buffer.byteLength(text);
const t = Tokenizer.fromFile(tj);
let best = Infinity, n = 0;
for (let r = 0; r < 1; r++) { // one run: slow on a huge string
  const t0 = process.hrtime.bigint();
  const e = await t.encode(text, null, { addSpecialTokens: false });
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  n = e.getIds().length;
  best = Math.min(best, dt);
}
// HF is superlinear on one huge string; also time it on ~64 KB chunks cut at line ends, its best case.
const chunks = [];
for (let i = 0; i < text.length;) {
  let j = Math.min(text.length, i + 65536);
  const nl = text.indexOf("\n", j);
  j = nl < 0 ? text.length : nl + 1;
  chunks.push(text.slice(i, j));
  i = j;
}
let bestc = Infinity, nc = 0;
for (let r = 0; r < 3; r++) {
  const t0 = process.hrtime.bigint();
  nc = 0;
  for (const c of chunks) nc += (await t.encode(c, null, { addSpecialTokens: false })).getIds().length;
  bestc = Math.min(bestc, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(JSON.stringify({ bytes, tokens: n, seconds: best, mb_s: bytes / 1e6 / best,
  chunked_tokens: nc, chunked_seconds: bestc, chunked_mb_s: bytes / 1e6 / bestc }));
