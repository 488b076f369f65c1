// Reference renderer for tests/test_chat_template.sh: renders a conversation with
// @huggingface/jinja (the renderer transformers.js uses), with the same inputs q35 gets.
// usage: node chat_render.mjs (--template F.jinja | --tokenizer-config F.json) --messages M.json
//        [--tools T.json] [--no-think | --think] [--no-generation-prompt]
//        or: node chat_render.mjs --batch JOBS.txt  (one job a line: OUTFILE then the options above,
//        tab-separated; each job writes its rendering to OUTFILE, or the error to OUTFILE.err)
// Messages are normalized as chat.h documents (content null -> "", text parts joined,
// tool-call arguments given as a JSON object string -> the object).
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "package.json"));
const { Template } = await import(require.resolve("@huggingface/jinja"));

function renderJob(a) {
  const opt = {};
  for (let i = 0; i < a.length; i++) {
    const k = a[i];
    if (["--template", "--tokenizer-config", "--messages", "--tools", "--vars"].includes(k)) opt[k] = a[++i];
    else opt[k] = true;
  }
  let src, bos = "", eos = "";
  if (opt["--template"]) src = readFileSync(opt["--template"], "utf8");
  else {
    const cfg = JSON.parse(readFileSync(opt["--tokenizer-config"], "utf8"));
    src = cfg.chat_template;
    if (Array.isArray(src)) src = src.find((e) => e.name === "default").template;
    const tok = (v) => (typeof v === "string" ? v : v && typeof v.content === "string" ? v.content : "");
    bos = tok(cfg.bos_token);
    eos = tok(cfg.eos_token);
  }
  if (opt["--vars"]) return new Template(src).render(JSON.parse(readFileSync(opt["--vars"], "utf8")));
  const messages = JSON.parse(readFileSync(opt["--messages"], "utf8")).map((m) => {
    m = structuredClone(m);
    if (m.content === null || m.content === undefined) m.content = "";
    else if (Array.isArray(m.content)) m.content = m.content.map((p) => (typeof p.text === "string" ? p.text : "")).join("");
    for (const tc of m.tool_calls || []) {
      const f = tc.function || tc;
      if (typeof f.arguments === "string") {
        try {
          const o = JSON.parse(f.arguments);
          if (o && typeof o === "object" && !Array.isArray(o)) f.arguments = o;
        } catch {}
      }
    }
    return m;
  });
  const vars = { messages, add_generation_prompt: !opt["--no-generation-prompt"], bos_token: bos, eos_token: eos };
  if (opt["--tools"]) vars.tools = JSON.parse(readFileSync(opt["--tools"], "utf8"));
  if (opt["--no-think"]) vars.enable_thinking = false;
  if (opt["--think"]) vars.enable_thinking = true;
  return new Template(src).render(vars);
}

const argv = process.argv.slice(2);
if (argv[0] === "--cases") {
  // --cases CASES.json OUTDIR: for case i write OUTDIR/case<i>.jinja, .vars.json, and the
  // reference rendering .ref (or the reference's error in .err); names in OUTDIR/names.txt
  const cases = JSON.parse(readFileSync(argv[1], "utf8"));
  const dir = argv[2];
  const names = [];
  cases.forEach((c, i) => {
    const base = `${dir}/case${i}`;
    writeFileSync(`${base}.jinja`, c.template);
    writeFileSync(`${base}.vars.json`, JSON.stringify(c.vars || {}));
    names.push(`${i}\t${c.name}`);
    try {
      writeFileSync(`${base}.ref`, new Template(c.template).render(c.vars || {}));
    } catch (e) {
      writeFileSync(`${base}.err`, String(e && e.message ? e.message : e));
    }
  });
  writeFileSync(`${dir}/names.txt`, names.join("\n") + "\n");
} else if (argv[0] === "--batch") {
  for (const line of readFileSync(argv[1], "utf8").split("\n")) {
    if (!line) continue;
    const [out, ...args] = line.split("\t");
    try {
      writeFileSync(out, renderJob(args));
    } catch (e) {
      writeFileSync(out + ".err", String(e && e.message ? e.message : e));
    }
  }
} else {
  process.stdout.write(renderJob(argv));
}
