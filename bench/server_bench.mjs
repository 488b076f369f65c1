// server_bench.mjs - aggregate decode tokens/s of a running `q35 serve` with 1, 2, 4, 8
// concurrent streams. Env: Q35_URL, BENCH_TOKENS (per stream, default 32), BENCH_STREAMS
// ("1,2,4,8"). Each stream asks for logprobs so every SSE chunk carries exactly its tokens.
// The decode window starts when every stream has its first token (prefill done) and ends
// with the last token; rate = tokens received in the window / its length.
const base = process.env.Q35_URL;
const nTok = Number(process.env.BENCH_TOKENS || 32);
const counts = (process.env.BENCH_STREAMS || '1,2,4,8').split(',').map(Number);

async function stream(i, log) {
  const body = { prompt: `benchmark stream ${i}: once upon a time`, max_tokens: nTok, temperature: 1, seed: i,
    logprobs: 0, stream: true };
  const r = await fetch(`${base}/v1/completions`, { method: 'POST', body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' } });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '';
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      const n = j.choices && j.choices[0] && j.choices[0].logprobs ? j.choices[0].logprobs.tokens.length : 0;
      if (n) log.push([performance.now(), n, i]);
    }
  }
}

async function run(c) {
  const log = [];
  await Promise.all(Array.from({ length: c }, (_, i) => stream(i, log)));
  const first = new Map();
  for (const [t, , i] of log) if (!first.has(i)) first.set(i, t);
  const t0 = Math.max(...first.values());
  const t1 = Math.max(...log.map((e) => e[0]));
  const toks = log.filter((e) => e[0] > t0).reduce((a, e) => a + e[1], 0);
  return { streams: c, tokens: toks, seconds: (t1 - t0) / 1000, tok_s: toks / ((t1 - t0) / 1000) };
}

await run(1); // warm-up
const res = [];
for (const c of counts) res.push(await run(c));
const single = res.find((r) => r.streams === 1);
for (const r of res) {
  r.ratio = single ? r.tok_s / single.tok_s : null;
  console.log(`streams ${r.streams}: ${r.tok_s.toFixed(2)} tok/s aggregate (${r.tokens} tokens in ${r.seconds.toFixed(2)} s)` +
    (r.ratio ? `, ${r.ratio.toFixed(2)}x single` : ''));
}
console.log(JSON.stringify({ bench: 'server_decode', tokens_per_stream: nTok, results: res }));
