// constrain_ajv.mjs - ajv (JSON Schema 2020-12, with ajv-formats) as the oracle for q35's
// constraint tests (tests/test_constrain_ajv.sh).
//
//   node constrain_ajv.mjs gen OUT_DIR N SEED
//       for each schema of the corpus below: OUT_DIR/K.schema.json, OUT_DIR/K.jsonl (N instances,
//       compact JSON: generated from the schema, half of them mutated) and OUT_DIR/K.expect
//       (ajv's verdict per instance: accept / reject)
//   node constrain_ajv.mjs validate SCHEMA.json TEXT_FILE...
//       prints one line per file: "valid" or "invalid <ajv errors>" (the file's text, trimmed of
//       the final newline, parsed as JSON; unparsable text is "invalid")
import fs from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

// The corpus: 2020-12 schemas inside what q35 supports; samples feed `pattern` strings.
const corpus = [
  { schema: { type: "object", properties: { name: { type: "string", minLength: 1, maxLength: 20 },
      age: { type: "integer", minimum: 0, maximum: 150 }, email: { type: "string", format: "email" },
      tags: { type: "array", items: { type: "string", maxLength: 5 }, maxItems: 3 },
      nick: { type: ["string", "null"] } }, required: ["name", "age"], additionalProperties: false } },
  { schema: { type: "array", prefixItems: [{ type: "integer" }, { type: "string", format: "date" }, { type: "boolean" }],
      items: false, minItems: 2 } },
  { schema: { $defs: { node: { type: "object", properties: { v: { type: "integer", exclusiveMinimum: -10, exclusiveMaximum: 10 },
      kids: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } }, required: ["v"], additionalProperties: false } },
      $ref: "#/$defs/node" } },
  { schema: { type: "object", properties: { id: { type: "string", format: "uuid" }, at: { type: "string", format: "date-time" },
      t: { type: "string", format: "time" }, kind: { enum: ["a", "b", 3, null] },
      code: { type: "string", pattern: "^[A-Z]{2}-\\d{3}$" } }, required: ["id", "kind"], additionalProperties: { type: "number" } },
    samples: ["AB-123", "ab-123", "ABC-12", "XY-999", "QQ-000x"] },
  { schema: { anyOf: [{ type: "integer", minimum: 100 }, { type: "string", pattern: "x+y" }, { const: { k: [1, 2] } }] },
    samples: ["xxy", "axyb", "yx", "abc", "x\"y"] },
  { schema: { type: "array", items: { type: "number", minimum: 0 }, minItems: 1, maxItems: 4 } },
  { schema: { type: "object", properties: { x: { type: "number", exclusiveMinimum: -5, maximum: 20 },
      y: { type: "number", exclusiveMaximum: 0 }, z: { oneOf: [{ type: "string", maxLength: 30 }, { type: "integer" }] } },
      required: ["x", "y"], additionalProperties: false } },
  { schema: { type: "object", properties: { a: { type: "object", properties: { b: { type: "boolean" } }, additionalProperties: true },
      c: { type: "array", items: { enum: [1, 2, 3] } }, d: { type: "integer", minimum: -1234567, maximum: 98765 } }, additionalProperties: false } },
  { schema: { type: "object", properties: { p0: { type: "integer" }, p1: { type: "string" }, p2: { type: "boolean" },
      p3: { type: "null" }, p4: { type: "integer" }, p5: { type: "string" }, p6: { type: "boolean" }, p7: { type: "integer" },
      p8: { type: "string" }, p9: { type: "integer" } }, required: ["p0", "p5", "p9"], additionalProperties: false },
    ordered: true },
  // allOf (merged), multipleOf, contains, not, propertyNames / min-maxProperties; `gen` is the
  // schema instances are generated from where the generator cannot read the schema itself
  { schema: { allOf: [{ type: "object", properties: { a: { type: "integer", minimum: 0 }, b: {} }, required: ["a"], additionalProperties: false },
      { properties: { b: { type: "string", maxLength: 4 }, a: { maximum: 50 } }, required: ["b"] }] },
    gen: { type: "object", properties: { a: { type: "integer", minimum: -5, maximum: 60 }, b: { type: "string", maxLength: 5 } }, required: ["a", "b"] } },
  { schema: { type: "object", properties: { m: { type: "integer", multipleOf: 7 }, q: { type: "integer", multipleOf: 5, minimum: -20, maximum: 40 },
      r: { type: "integer", multipleOf: 3, minimum: 0 } }, required: ["m"], additionalProperties: false } },
  { schema: { type: "array", items: { type: "integer" }, contains: { minimum: 90000 } } },
  { schema: { type: "object", properties: { v: { not: { type: "string" } }, w: { type: ["integer", "null"], not: { type: "null" } } },
      required: ["v"], additionalProperties: false } },
  { schema: { type: "object", propertyNames: { pattern: "^[a-z]{1,3}$" }, additionalProperties: { type: "integer" }, minProperties: 1, maxProperties: 3 },
    gen: { type: "object", properties: { ab: { type: "integer" }, c: { type: "integer" }, xyz: { type: "integer" }, d1: { type: "integer" }, wxyz: { type: "integer" } } } },
  { schema: { type: "object", properties: { u: { type: "string", format: "uri" }, t: { type: "string", format: "uri-template" },
      r: { type: "string", format: "uri-reference" },
      e: { oneOf: [{ type: "object", properties: { kind: { enum: ["a"] }, x: { type: "integer" } }, required: ["kind"], additionalProperties: false },
        { type: "object", properties: { kind: { const: "b" }, y: { type: "string", format: "uri" } }, required: ["kind", "y"], additionalProperties: false }] } },
      required: ["u", "t"], additionalProperties: false },
    samples: ["https://api.github.com/repos/o/r", "http://a.b:8080/x?y=1#z", "mailto:someone@example.com", "urn:isbn:0451450523",
      "https://x.com/{owner}/{repo}", "/relative/path", "a:", "ftp://user:pw@host/file", "https://api.github.com/repos/{owner}{/repo}{?since,per_page}",
      "{+path}/here", "x y", "https://ex.com/%7Euser", "https://ex.com/%zz", "{var:30}", "{var*}", "http://a.b/c d", "h://x/'q'", "tel:+1-816-555-1212",
      "https://h/\u00fc", "news:comp.infosystems.www.servers.unix", "{a,b:0}", "{x}{y}", "s3://bucket/key?versionId=3&x=%41",
      "", "#frag", "../a/b?c#d", "//host:80/p", "/abs/x", "./x:y", "?q=1", "a b#c", "%zz", "#a#b", "x/y/z", "//u@h", "#/definitions/x"] },
  // dependentRequired / dependentSchemas (exact for up to 8 listed properties), a required name
  // that only additionalProperties covers, enum beside other keywords (values filtered by them)
  { schema: { type: "object", properties: { a: { type: "integer" }, b: { type: "string", maxLength: 3 }, c: { type: "boolean" } },
      dependentRequired: { a: ["b"], c: ["a", "b"] }, additionalProperties: false } },
  { schema: { type: "object", properties: { kind: { enum: ["x", "y"] }, n: { type: "integer" }, s: { type: "string", maxLength: 2 } },
      dependentSchemas: { n: { properties: { kind: { const: "x" } }, required: ["kind"] }, s: { required: ["n"] } },
      additionalProperties: false } },
  { schema: { type: "object", required: ["id"], additionalProperties: { type: "integer", minimum: 0 } },
    gen: { type: "object", properties: { id: { type: "integer", minimum: -2, maximum: 9 }, x: { type: "integer", minimum: 0, maximum: 5 } } } },
  { schema: { enum: [1, 10, "a", "bb", null, 7.5], minimum: 5, maxLength: 1 } },
  // patternProperties with additional properties off: extra keys match a pattern
  { schema: { type: "object", properties: { id: { type: "integer" } }, required: ["id"],
      patternProperties: { "^x-[a-z]+$": { type: "string", maxLength: 3 }, "^[0-9]{2}$": { type: "string", maxLength: 3 } },
      additionalProperties: false },
    gen: { type: "object", properties: { id: { type: "integer", minimum: 0, maximum: 9 }, "x-ab": { type: "string", maxLength: 4 },
      "x-": { type: "string", maxLength: 2 }, "12": { type: "string", maxLength: 3 }, "x-Q": { type: "string", maxLength: 1 } },
      required: ["id"] } },
  // if / then / else: a discriminator const over an enum, number bounds, required names, a type test
  { schema: { type: "object", properties: { kind: { enum: ["card", "bank", "cash"] }, number: { type: "string", maxLength: 4 },
      iban: { type: "string", maxLength: 6 } }, required: ["kind"], additionalProperties: false,
      if: { properties: { kind: { const: "card" } } }, then: { required: ["number"] }, else: { properties: { number: false } } } },
  { schema: { type: "number", if: { exclusiveMaximum: 0 }, then: { minimum: -10 }, else: { multipleOf: 2 } },
    gen: { type: "number", minimum: -20, maximum: 20 } },
  { schema: { type: "object", properties: { a: { type: "integer" }, b: { type: "string", maxLength: 2 } }, additionalProperties: false,
      if: { required: ["a"] }, then: { required: ["b"] } } },
  { schema: { if: { type: "string" }, then: { maxLength: 2 }, else: { type: "integer", minimum: 0 } },
    gen: { anyOf: [{ type: "string", maxLength: 4 }, { type: "integer", minimum: -3, maximum: 3 }, { type: "boolean" }] } },
  { schema: { type: ["object", "null", "integer"], properties: { a: { type: "integer" }, b: { type: "string", maxLength: 1 } },
      additionalProperties: false, if: { type: "object", required: ["a"] }, then: { required: ["b"] },
      else: { type: ["null", "object"], maxProperties: 0 } },
    gen: { anyOf: [{ type: "null" }, { type: "integer", minimum: 0, maximum: 3 },
      { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 3 }, b: { type: "string", maxLength: 2 } } }] } },
  // uniqueItems over a small enum
  { schema: { type: "array", items: { enum: ["r", "w", "x", 1, null] }, uniqueItems: true, minItems: 1, maxItems: 4 } },
];

let rng = 1;
const rand = () => ((rng = (rng * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pad = (n, w) => String(n).padStart(w, "0");

function genString(s, samples) {
  if (s.pattern) return pick(samples);
  const f = s.format;
  if (f === "date") return `${pad(int(1890, 2100), 4)}-${pad(int(1, 12), 2)}-${pad(int(1, 31), 2)}`;
  if (f === "time") return `${pad(int(0, 24), 2)}:${pad(int(0, 59), 2)}:${pad(int(0, 60), 2)}${pick(["Z", "+01:00", "-23:59", "", ".5z"])}`;
  if (f === "date-time") return `${genString({ format: "date" })}${pick(["T", "t", " "])}${genString({ format: "time" })}`;
  if (f === "uuid") return [8, 4, 4, 4, 12].map((n) => Array.from({ length: n }, () => pick("0123456789abcdefABCDEF")).join("")).join("-");
  if (f === "uri" || f === "uri-template" || f === "uri-reference") return pick(samples);
  if (f === "email") return pick(["a.b@c.de", "x@y", "first.last+tag@mail.example.org", "bad@-x.com", "q@w.e"]);
  const alphabet = ["a", "b", "Z", " ", "é", "日", "😀", "\"", "\\", "\n", "\u0001", "/", "x"];
  const lo = s.minLength || 0, hi = s.maxLength !== undefined ? s.maxLength : lo + 6;
  return Array.from({ length: int(lo, hi) }, () => pick(alphabet)).join("");
}

function gen(s, root, samples, depth) {
  if (s === true || s === undefined) return pick([1, "s", null, [true], { k: 2 }]);
  if (s.$ref) return gen(s.$ref.split("/").slice(1).reduce((o, k) => o[k], root), root, samples, depth + 1);
  if (s.const !== undefined) return s.const;
  if (s.enum) return pick(s.enum);
  if (s.anyOf || s.oneOf) return gen(pick(s.anyOf || s.oneOf), root, samples, depth);
  const t = Array.isArray(s.type) ? pick(s.type) : s.type;
  if (t === "null") return null;
  if (t === "boolean") return rand() < 0.5;
  if (t === "integer") {
    const lo = s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : -1000);
    const hi = s.maximum ?? (s.exclusiveMaximum !== undefined ? s.exclusiveMaximum - 1 : 100000);
    if (s.multipleOf) return s.multipleOf * int(Math.ceil(lo / s.multipleOf), Math.floor(hi / s.multipleOf));
    return int(lo, hi);
  }
  if (t === "number") { // bounded numbers are generated without an exponent (docs/CONSTRAIN.md)
    const bounded = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"].some((k) => s[k] !== undefined);
    if (!bounded) return pick([0, 1.5, 2e-7, 12345.25, 3, 1e21]);
    // mostly values inside the bounds (so valid instances occur), sometimes any of the picks
    const inside = (x) => !(x < s.minimum || x > s.maximum || x <= s.exclusiveMinimum || x >= s.exclusiveMaximum);
    const picks = [0, 1.5, 0.001, 12345.25, 3, 7, -2.5, -4, -0.75];
    const ok = picks.filter(inside);
    return pick(ok.length && rand() < 0.7 ? ok : picks);
  }
  if (t === "string") return genString(s, samples);
  if (t === "array" || s.prefixItems || s.items) {
    const out = [];
    const pre = s.prefixItems || [];
    const n = depth > 3 ? (s.minItems || 0) : int(s.minItems || 0, s.maxItems ?? (pre.length + 3));
    for (let i = 0; i < n; i++) {
      const sub = i < pre.length ? pre[i] : s.items;
      if (sub === false) break;
      out.push(gen(sub, root, samples, depth + 1));
    }
    return out;
  }
  const o = {};
  const props = Object.keys(s.properties || {});
  const order = props.length > 8 ? props : props.sort(() => rand() - 0.5);
  for (const k of order)
    if ((s.required || []).includes(k) || rand() < 0.6) o[k] = gen(s.properties[k], root, samples, depth + 1);
  if (s.additionalProperties && rand() < 0.3) o["extra" + int(0, 9)] = gen(s.additionalProperties, root, samples, depth + 1);
  return o;
}

// A random change somewhere in v (may keep it valid; ajv decides).
function mutate(v) {
  if (Array.isArray(v) && v.length && rand() < 0.6) {
    const i = int(0, v.length - 1);
    const w = v.slice();
    w[i] = mutate(w[i]);
    return rand() < 0.2 ? w.concat([w[0]]) : w;
  }
  if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length && rand() < 0.7) {
    const keys = Object.keys(v), k = pick(keys), w = { ...v };
    const r = rand();
    if (r < 0.3) delete w[k];
    else if (r < 0.5) w["zz" + int(0, 3)] = 7;
    else w[k] = mutate(w[k]);
    return w;
  }
  if (typeof v === "number") return pick([v + 1, v - 1, -v, v + 0.5, "1", null].map((x) => (typeof x === "number" && Math.abs(x) > 1e20 ? 5 : x)));
  if (typeof v === "string") return pick([v + "x", v.slice(1), "", 5, v.toUpperCase()]);
  return pick([0, "", null, [], {}, true, -3]);
}

// ---- number bounds: long numerals next to the bounds ----
// q35's policy (docs/CONSTRAIN.md, "Numbers"): under a bound a numeral (no exponent, not -0) is
// accepted iff its value satisfies each bound both as a double (what ajv sees after JSON.parse)
// and exactly as a decimal (checked here with BigInt; a bound's decimal is String(bound), the
// shortest decimal of the schema's double). The numerals: the exact decimal expansions of the
// bound's double and its neighbours, the midpoints between them (where rounding changes), each
// a tiny bit above and below (1e-25), and String() of the three doubles.
const numericCorpus = [
  { type: "number", exclusiveMinimum: 0.5, maximum: 2.75 },
  { type: "number", minimum: 0.1, exclusiveMaximum: 0.3 },
  { type: "number", exclusiveMinimum: -1.25, exclusiveMaximum: 1e-7 },
  { type: "number", minimum: -123.456, maximum: -0.001 },
  { type: "integer", exclusiveMinimum: 2.5, maximum: 9007199254740993 },
  { type: "number", exclusiveMaximum: 0.30000000000000004, minimum: 0.2999999999999999 },
  { type: "number", exclusiveMaximum: 0 },
];

function bitsOf(x) { const dv = new DataView(new ArrayBuffer(8)); dv.setFloat64(0, x); return dv.getBigUint64(0); }
function ofBits(b) { const dv = new DataView(new ArrayBuffer(8)); dv.setBigUint64(0, b); return dv.getFloat64(0); }
function nextUp(x) { if (x === 0) return Number.MIN_VALUE; const b = bitsOf(x); return ofBits(x > 0 ? b + 1n : b - 1n); }
function nextDown(x) { return -nextUp(-x); }
// x as m * 2^e with m a BigInt
function dyadic(x) {
  const b = bitsOf(x), neg = b >> 63n, be = Number((b >> 52n) & 0x7ffn), frac = b & ((1n << 52n) - 1n);
  const m = be ? frac | (1n << 52n) : frac, e = (be ? be : 1) - 1075;
  return { m: neg ? -m : m, e };
}
// the exact decimal of m * 2^e (plain, no trailing zeros)
function decOf(m, e) {
  const neg = m < 0n;
  if (neg) m = -m;
  let s;
  if (e >= 0) s = (m << BigInt(e)).toString();
  else {
    const k = -e, digits = (m * 5n ** BigInt(k)).toString().padStart(k + 1, "0");
    s = (digits.slice(0, digits.length - k) + "." + digits.slice(digits.length - k)).replace(/\.?0+$/, "");
  }
  return (neg && s !== "0" ? "-" : "") + s;
}
function exactOf(x) { const d = dyadic(x); return decOf(d.m, d.e); }
function midOf(a, b) {
  const da = dyadic(a), db = dyadic(b), e = Math.min(da.e, db.e);
  return decOf((da.m << BigInt(da.e - e)) + (db.m << BigInt(db.e - e)), e - 1);
}
// a plain decimal string as [BigInt numerator, scale]
function rat(s) {
  const neg = s.startsWith("-"), t = neg ? s.slice(1) : s;
  let [ip, fp = ""] = t.split(".");
  if (t.includes("e") || t.includes("E")) { // String(1e-7): rewrite plainly
    const [mant, ex] = t.toLowerCase().split("e");
    const [mi, mf = ""] = mant.split("."), digits = mi + mf, pt = mi.length + Number(ex);
    if (pt <= 0) { ip = "0"; fp = "0".repeat(-pt) + digits; } else { ip = digits.slice(0, pt).padEnd(pt, "0"); fp = digits.slice(pt); }
  }
  const n = BigInt(ip + fp) * (neg ? -1n : 1n);
  return [n, fp.length];
}
function cmpDec(a, b) {
  const [na, sa] = rat(a), [nb, sb] = rat(b);
  const x = na * 10n ** BigInt(Math.max(sb - sa, 0)), y = nb * 10n ** BigInt(Math.max(sa - sb, 0));
  return x < y ? -1 : x > y ? 1 : 0;
}
function exactOk(schema, text) {
  if (schema.type === "integer" && text.includes(".")) return false; // an integer has no fraction
  const ops = { minimum: (c) => c >= 0, exclusiveMinimum: (c) => c > 0, maximum: (c) => c <= 0, exclusiveMaximum: (c) => c < 0 };
  for (const [k, ok] of Object.entries(ops))
    if (schema[k] !== undefined && !ok(cmpDec(text, String(schema[k])))) return false;
  return true;
}
function numerals(schema) {
  const out = new Set(["0", "1", "0.5"]);
  const around = (s) => {
    s = s.replace(/^-/, "");
    out.add(s);
    out.add(s + (s.includes(".") ? "" : ".") + "0".repeat(24) + "1");
    if (s.includes(".")) out.add(s.slice(0, -1) + String(Number(s.slice(-1)) - 1) + "9".repeat(25));
    else if (s !== "0") out.add((BigInt(s) - 1n).toString() + "." + "9".repeat(25));
  };
  for (const k of ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"]) {
    if (schema[k] === undefined) continue;
    const X = schema[k], nb = [nextDown(X), X, nextUp(X)];
    for (const y of nb) {
      around(exactOf(y));
      around(plain(...rat(String(y))));
    }
    around(midOf(nb[0], nb[1]));
    around(midOf(nb[1], nb[2]));
  }
  const all = [...out];
  for (const s of all) out.add("-" + s);
  return [...out].filter((s) => !/^-0(\.0*)?$/.test(s));
}
function plain(n, scale) {
  const neg = n < 0n, d = (neg ? -n : n).toString().padStart(scale + 1, "0");
  const s = scale ? (d.slice(0, d.length - scale) + "." + d.slice(d.length - scale)).replace(/\.?0+$/, "") : d;
  return (neg ? "-" : "") + s;
}

function ajvFor(schema) {
  const ajv = new Ajv2020({ strict: false, allErrors: false });
  addFormats(ajv);
  return ajv.compile(schema);
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "gen") {
  const [dir, nStr, seedStr] = args;
  rng = Number(seedStr) || 1;
  fs.mkdirSync(dir, { recursive: true });
  corpus.forEach((c, k) => {
    const validate = ajvFor(c.schema);
    const lines = [], expect = [];
    const seen = new Set();
    for (let i = 0; i < Number(nStr) * 4 && lines.length < Number(nStr); i++) {
      let v = gen(c.gen || c.schema, c.gen || c.schema, c.samples || [], 0);
      if (i % 2) v = mutate(v);
      const text = JSON.stringify(v);
      if (text === undefined || seen.has(text)) continue;
      seen.add(text);
      lines.push(text);
      expect.push(validate(v) ? "accept" : "reject");
    }
    fs.writeFileSync(`${dir}/${k}.schema.json`, JSON.stringify(c.schema));
    fs.writeFileSync(`${dir}/${k}.jsonl`, lines.join("\n") + "\n");
    fs.writeFileSync(`${dir}/${k}.expect`, expect.join("\n") + "\n");
  });
  { // one object schema whose property nJ is numericCorpus[J]; each instance sets one of them
    const props = Object.fromEntries(numericCorpus.map((sc, j) => [`n${j}`, sc]));
    const schema = { type: "object", properties: props, additionalProperties: false };
    const validate = ajvFor(schema), lines = [], expect = [];
    numericCorpus.forEach((sc, j) => {
      for (const t of numerals(sc)) {
        lines.push(`{"n${j}":${t}}`);
        expect.push(validate(JSON.parse(lines[lines.length - 1])) && exactOk(sc, t) ? "accept" : "reject");
      }
    });
    const k = corpus.length;
    fs.writeFileSync(`${dir}/${k}.schema.json`, JSON.stringify(schema));
    fs.writeFileSync(`${dir}/${k}.jsonl`, lines.join("\n") + "\n");
    fs.writeFileSync(`${dir}/${k}.expect`, expect.join("\n") + "\n");
  }
  console.log(corpus.length + 1);
} else if (cmd === "validate") {
  const validate = ajvFor(JSON.parse(fs.readFileSync(args[0], "utf8")));
  for (const f of args.slice(1)) {
    const text = fs.readFileSync(f, "utf8").replace(/\n$/, "");
    let v;
    try {
      v = JSON.parse(text);
    } catch (e) {
      console.log(`invalid not JSON: ${JSON.stringify(text.slice(0, 80))}`);
      continue;
    }
    console.log(validate(v) ? "valid" : `invalid ${JSON.stringify(validate.errors).slice(0, 300)}`);
  }
} else {
  console.error("usage: constrain_ajv.mjs gen OUT_DIR N SEED | validate SCHEMA FILE...");
  process.exit(2);
}
