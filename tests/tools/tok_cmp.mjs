// tok_cmp.mjs - compare two JSONL files value by value: node tok_cmp.mjs LABEL GOT EXPECTED [CORPUS]
// Prints each mismatching line (up to 10) with the corpus text when given; exit 1 on any mismatch.
import fs from "fs";
const [label, gotF, expF, corpusF] = process.argv.slice(2);
const rd = (f) => fs.readFileSync(f, "utf8").split("\n").filter((l) => l.length);
const got = rd(gotF), exp = rd(expF), corpus = corpusF ? rd(corpusF) : [];
let bad = 0;
if (got.length !== exp.length) { console.error(`${label}: ${got.length} lines, expected ${exp.length}`); bad++; }
for (let i = 0; i < Math.min(got.length, exp.length); i++) {
  const g = JSON.stringify(JSON.parse(got[i])), e = JSON.stringify(JSON.parse(exp[i]));
  if (g !== e) {
    if (++bad <= 10) console.error(`${label}: line ${i + 1} differs${corpus[i] ? " for " + corpus[i].slice(0, 200) : ""}\n  got      ${g.slice(0, 300)}\n  expected ${e.slice(0, 300)}`);
  }
}
console.error(`${label}: ${Math.min(got.length, exp.length) - (bad > 0 && got.length !== exp.length ? 0 : 0)} lines compared, ${bad} mismatches`);
process.exit(bad ? 1 : 0);
