// tok_corpus.mjs - generates tests/data/tokenizer_corpus.jsonl, the tokenizer test corpus.
// Deterministic (seeded PRNG); the generated file is committed. Run: node tok_corpus.mjs > FILE
let seed = 0x9e3779b9;
function rnd() { // xorshift32
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rnd() * a.length)];
const ri = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
const out = [];
const add = (s) => out.push(s);

// Hand-written cases: every trap named in the tokenizer brief.
[
  "", " ", "  ", "\n", "\r\n", "\r", "\t", "a", "Hello world", "Hello, world!", "hello  world",
  "The quick brown fox jumps over the lazy dog.", "  leading spaces", "trailing spaces   ",
  "line1\nline2\n\nline4\n", "crlf\r\nline\r\n\r\nend", "cr only\rnext\r\rend\r", "tabs\tand\t\tmore\t",
  "mixed \t \n \r\n  \t\n", "   \n   \n   ", "word\n\n\n\n\nword", "x\r\n\r\n\r\n", " \r\n \r\n",
  "it's I'm you're we've they'll he'd don't", "IT'S I'M YOU'RE WE'VE THEY'LL HE'D DON'T",
  "It'S I'M You'Re We'vE They'Ll He'D", "it'ſ it'ſa 'ſ x'ſ 'ſſ", "it'K it'\u212a '\u212a x'\u212aa",
  "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "''s '''ll 'x 'sss", "it\u2019s curly apostrophe",
  "it'\ufb06 ligature st, it'\ufb05, stra\u00dfe STRASSE", "O'Neill's mother-in-law's", "rock'n'roll",
  "0", "42", "1234567890", "3.14159", "-1e10", "1,000,000", "$100.00", "12:30:45", "2024-01-01",
  "0x1F 0b1010 0o777", "\u0661\u0662\u0663 \u0967\u0968\u0969 \uff11\uff12\uff13 \u00b2\u00b3 \u2460\u2461 \u2155",
  "version 1.2.3-rc4+build.5", "phone: +1 (555) 123-4567", "IPv4 192.168.0.1, IPv6 ::1",
  "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
  "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }\n",
  "const x = () => { return `tmpl ${y}`; };", "SELECT * FROM users WHERE id = 1;",
  "<div class=\"a\">text</div>", "{\"key\": [1, 2, {\"nested\": null}], \"b\": true}",
  "    indented code\n        more indented\n", "if x:\n\tif y:\n\t\tpass\n", "a->b && c || !d; e::f",
  "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Users\\name\\file.txt",
  "!!!???...,,,;;;:::", "--- === *** ___ ~~~", "(((nested)))", "[[1,2],[3,4]]", "@#$%^&*()",
  "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
  "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3001\u3072\u3089\u304c\u306a",
  "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.", "\u1100\u1161\u11a8 decomposed hangul \u1112\u1161\u11ab",
  "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u0627\u0644\u0633\u0651\u064e\u0644\u0627\u0645\u064f \u0639\u064e\u0644\u064e\u064a\u0652\u0643\u064f\u0645\u0652",
  "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
  "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u0915\u093e \u0909\u0926\u093e\u0939\u0930\u0923\u0964",
  "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e40\u0e02\u0e35\u0e22\u0e19\u0e15\u0e34\u0e14\u0e01\u0e31\u0e19",
  "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
  "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u0532\u0561\u0580\u0565\u0582", "\u1019\u1004\u103a\u1039\u1002\u101c\u102c\u1015\u102b",
  "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd", "\u0c24\u0c46\u0c32\u0c41\u0c17\u0c41", "\u0d2e\u0d32\u0d2f\u0d3e\u0d33\u0d02", "\u0f56\u0f7c\u0f51\u0f0b\u0f61\u0f72\u0f42",
  "\ud83d\ude00\ud83d\ude03\ud83d\ude04", "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66 family",
  "\ud83c\uddfa\ud83c\uddf8\ud83c\uddef\ud83c\uddf5\ud83c\uddeb\ud83c\uddf7 flags", "\ud83d\udc4d\ud83c\udffd skin tone", "\u2764\ufe0f heart VS16",
  "\ud83c\udff3\ufe0f\u200d\ud83c\udf08 rainbow flag", "text\ud83d\ude00text", " \ud83d\ude00 ", "\ud83e\udd16\ud83e\udde0\ud83d\ude80",
  "e\u0301", "caf\u0065\u0301", "cafe\u0301 vs caf\u00e9", "\u0301", "a\u0301\u0302\u0303\u0304", "o\u0308 u\u0308 a\u030a",
  "A\u030a\u212b\u00c5", "\u0065\u0301\u0327", "\u1e9b\u0323", "\u0071\u0307\u0323", "x\u0338", "=\u0338 <\u0338 >\u0338",
  "<think>\u0338", "\u0338<think>", "n\u0303o\u0302", "\u0915\u093c \u0958", "\u304b\u3099 \u304c", "\u00c5\u0301\u0301",
  "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
  "non\u00a0breaking\u00a0space", "a\u00a0\u00a0b", "nel\u0085line", "!\u0085", "\u0085\u0085x", "bom\ufeffinside", "\ufeffstart",
  "!\ufeff", "mongolian\u180evowel", "!\u180e", "\u180e\u180e", "line\u2028sep", "para\u2029sep", "!\u2028", "ideo\u3000space",
  "\u3000\u3000\u3000", "thin\u2009space hair\u200aspace", "zero\u200bwidth", "zwj\u200dzwnj\u200c", "\u1680ogham", "nnbsp\u202fx",
  "mmsp\u205fx", "en\u2002em\u2003", "\u000bvt\u000cff", "\u001c\u001d\u001e\u001f seps", "\u0000nul\u0000", "bell\u0007esc\u001b[0m",
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>system\nYou are helpful.<|im_end|>",
  "<think>\nreasoning\n</think>\n\nanswer", "<think></think>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
  "<tool_response>ok</tool_response>", "<|endoftext|>", "a<|endoftext|>b", "<|im_end|><|im_end|>", "<|im_start|",
  "<|im_start|><|im_start|>", "< |im_start|>", "<|IM_START|>", " <|im_start|> ", "x<think>y</think>z",
  "<|fim_prefix|>def<|fim_suffix|>ret<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>", "<|box_start|>(1,2)<|box_end|>",
  "<|file_sep|><|repo_name|>", "<<|im_end|>>", "<|im_end|>\u0301", "<|endoftext|\u0301>", "<think>\u00a0</think>",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
  "Donaudampfschifffahrtsgesellschaftskapit\u00e4n", "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9",
  "HELLO WORLD SHOUTING", "camelCaseIdentifier snake_case_identifier SCREAMING_SNAKE kebab-case",
  "\u00bfQu\u00e9 tal? \u00a1Muy bien! Espa\u00f1a, ni\u00f1o, se\u00f1or.", "Fran\u00e7ais: \u00e7a, \u0153uvre, na\u00efve, No\u00ebl",
  "Stra\u00dfe \u00fcber \u00c4rger \u00d6l", "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u", "Ti\u0065\u0302\u0301ng Vi\u0065\u0323\u0302t decomposed",
  "\u0130stanbul \u0131\u015f\u0131k", "\u1f08\u03b8\u03b7\u03bd\u1fb6", "\u0100\u0101\u0102\u0103 \u01c4\u01c5\u01c6 \u01f1\u01f2\u01f3",
  "\u2160\u2161\u2162 \u216a roman", "\u00bd \u00bc \u2153", "\u2211 \u222b \u221e \u2248 \u2260 \u2264", "\u03b1\u03b2\u03b3 + \u0394x = \u2207f",
  "\u00a9 \u00ae \u2122 \u00a7 \u00b6", "\u20ac \u00a3 \u00a5 \u20b9 \u20bf", "\u2190 \u2192 \u2191 \u2193 \u21d2", "\u2500\u2502\u250c\u2510 box",
  "\u2603\u2600\u2601 \u263a", "\ud835\udc00\ud835\udc01\ud835\udc02 math bold", "\ud800\udf00\ud800\udf01 old italic", "\ud840\udc00\ud840\udc01 ext-B",
  "\ue000\uf8ff private", "\ufffd replacement", "\ufff0\ufff9", "\u00ad soft hyphen", "a\u2060b word joiner",
  "\u200e\u200f rtl marks", "\u202a\u202b\u202c embedding", "\u0600\u0601 arabic number sign", "\u1160\u3164 hangul filler",
].forEach(add);

// Whitespace runs, including long ones.
for (const n of [2, 3, 7, 16, 33, 100, 1000, 5000]) add(" ".repeat(n));
for (const n of [2, 5, 50, 500]) add("\n".repeat(n));
for (const n of [3, 40, 400]) add("\t".repeat(n));
for (const n of [4, 64]) add("\r\n".repeat(n));
add("x" + " ".repeat(200) + "y"); add("x" + " ".repeat(200)); add(" ".repeat(200) + "y");
add("a \n b  \n\n c   \r\n d    \t e"); add(" \t \t \n \n \t ".repeat(20));
add("\u3000".repeat(50)); add("\u00a0".repeat(30) + "x"); add("\u0085".repeat(10));
add(" ".repeat(10) + "\n" + " ".repeat(10) + "\n"); add("end with space "); add("end with newline\n");

// Very long words.
add("a".repeat(5000)); add("ab".repeat(3000)); add("\u00e9".repeat(2000)); add("\u4e00".repeat(1000));
add("x".repeat(300) + " " + "y".repeat(300)); add("1".repeat(500)); add("!".repeat(1000)); add("\ud83d\ude00".repeat(300));
add("e\u0301".repeat(500)); add("Lorem".repeat(400));

// Random compositions from pools.
const words = ["the", "of", "and", "to", "in", "is", "was", "that", "for", "it", "with", "as", "his", "on", "be",
  "tokenizer", "Qwen", "model", "inference", "engine", "GPU", "CPU", "attention", "delta", "rule", "expert",
  "Hello", "World", "HTTP", "JSON", "api", "v2", "x86", "AVX512", "don't", "can't", "I'll", "WE'RE", "it'S",
  "\u4e2d\u6587", "\u6570\u636e", "\u65e5\u672c", "\u0645\u0631\u062d\u0628\u0627", "\u043f\u0440\u0438\u0432\u0435\u0442",
  "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "caf\u00e9", "cafe\u0301", "na\u00efve",
  "\ud83d\ude00", "\ud83d\udc4d\ud83c\udffb", "\ud83c\uddec\ud83c\udde7", "123", "4.5", "2024", "<think>", "<|im_end|>",
  "(", ")", "{", "}", ";", ",", ".", "!", "?", "'", "\"", "-", "_", "=", "+", "/", "\\", "#", "@", "&", "*"];
const seps = [" ", " ", " ", " ", "", "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000", "\u0085", ", ", ". ", "\n\n", "   "];
for (let k = 0; k < 120; k++) {
  const n = ri(1, 40);
  let s = "";
  for (let i = 0; i < n; i++) s += pick(words) + pick(seps);
  add(s);
}

// Random code points from assigned, stable ranges (letters, marks, digits, punctuation, symbols,
// whitespace, CJK, emoji). Surrogates and unassigned code points are avoided.
const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ea],
  [0x620, 0x64a], [0x64b, 0x65f], [0x660, 0x669], [0x905, 0x939], [0x93e, 0x94d], [0x966, 0x96f], [0xe01, 0xe3a],
  [0xe40, 0xe5b], [0x1100, 0x1112], [0x1161, 0x1175], [0x2000, 0x200a], [0x2010, 0x2027], [0x2030, 0x205e],
  [0x2070, 0x2071], [0x20a0, 0x20bf], [0x2100, 0x214f], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2460, 0x24ff],
  [0x3000, 0x303f], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff01, 0xff5e],
  [0x1f600, 0x1f64f], [0x1f300, 0x1f5ff], [0x1d400, 0x1d44f], [0x9, 0xd], [0x85, 0x85], [0x1f1e6, 0x1f1ff]];
for (let k = 0; k < 80; k++) {
  const n = ri(1, 60);
  let s = "";
  for (let i = 0; i < n; i++) {
    const [lo, hi] = pick(ranges);
    s += String.fromCodePoint(ri(lo, hi));
  }
  add(s);
}

// Random ASCII including control characters.
for (let k = 0; k < 30; k++) {
  const n = ri(1, 80);
  let s = "";
  for (let i = 0; i < n; i++) s += String.fromCharCode(rnd() < 0.1 ? ri(0, 31) : ri(32, 126));
  add(s);
}

for (const s of out) process.stdout.write(JSON.stringify({ text: s }) + "\n");
