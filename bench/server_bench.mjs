// server_bench.mjs - aggregate decode tokens/s of a running `q35 serve` with 1, 2, 4, 8
// concurrent streams. Env: Q35_URL, BENCH_TOKENS (per stream, default 32), BENCH_STREAMS
// ("1,2,4,8"), BENCH_ROUNDS (default 3; each round runs every count once, in order),
// BENCH_PROMPT_IDS (token ids for the prompts instead of text), BENCH_WARMUP=0 (no one-stream
// warm-up round before the measured ones).
// Each stream asks for logprobs so every SSE chunk carries exactly its tokens.
//
// Client rate: the steady-state window, from the moment EVERY stream has its first token
// (all prefills done) to the moment the FIRST stream ends (all N still decoding); rate =
// tokens received inside the window / its length. Staggered starts and ragged ends (steps with
// fewer rows) are outside it.
// Server side: /metrics is read at both window edges; the difference gives the model steps run
// inside the window, rows per step (N when every stream shares each step) and milliseconds per
// step (the q35_step call alone, to compare with bench/step_batch at the same row count).
// Reported per count: medians over the rounds; ratios to one stream from the same rounds.
const base = process.env.Q35_URL;
const nTok = Number(process.env.BENCH_TOKENS || 32);
const counts = (process.env.BENCH_STREAMS || '1,2,4,8').split(',').map(Number);
const rounds = Number(process.env.BENCH_ROUNDS || 3);
// BENCH_PROMPT_IDS ("1,2,3"): token-id prompts (stream i adds i to the first id) instead of text
const promptIds = process.env.BENCH_PROMPT_IDS ? process.env.BENCH_PROMPT_IDS.split(',').map(Number) : null;

async function metrics() {
  const t = await (await fetch(`${base}/metrics`)).text();
  const get = (k) => Number((t.match(new RegExp(`^q35_${k} (\\S+)`, 'm')) || [])[1] || 0);
  return { steps: get('steps_total'), rows: get('step_rows_total'), sec: get('step_seconds_total') };
}

async function run(c) {
  const first = new Array(c).fill(null);
  const log = [];
  let nFirst = 0, ended = false, t0 = null, t1 = null, m0 = null, m1 = null;
  async function stream(i) {
    const body = { prompt: promptIds ? promptIds.map((t, k) => (k ? t : t + i)) : `benchmark stream ${i}: once upon a time`,
      max_tokens: nTok, temperature: 1, seed: i, logprobs: 0, stream: true };
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
        if (!n) continue;
        const now = performance.now();
        log.push([now, n]);
        if (first[i] === null) {
          first[i] = now;
          if (++nFirst === c) {
            t0 = now;
            m0 = metrics();
          }
        }
      }
    }
    if (!ended) { // the first stream to end closes the window
      ended = true;
      t1 = performance.now();
      m1 = t0 !== null ? metrics() : null;
    }
  }
  await Promise.all(Array.from({ length: c }, (_, i) => stream(i)));
  const res = { streams: c, tokens: 0, seconds: 0, tok_s: NaN, steps: 0, rows_per_step: NaN, ms_per_step: NaN };
  if (t0 === null || t1 === null || t1 <= t0) return res;
  res.tokens = log.filter((e) => e[0] > t0 && e[0] <= t1).reduce((a, e) => a + e[1], 0);
  res.seconds = (t1 - t0) / 1000;
  res.tok_s = res.tokens / res.seconds;
  const [a, b] = await Promise.all([m0, m1]);
  if (a && b && b.steps > a.steps) {
    res.steps = b.steps - a.steps;
    res.rows_per_step = (b.rows - a.rows) / res.steps;
    res.ms_per_step = (1000 * (b.sec - a.sec)) / res.steps;
  }
  return res;
}

const median = (v) => {
  const s = v.filter((x) => Number.isFinite(x)).sort((x, y) => x - y);
  if (!s.length) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

if (process.env.BENCH_WARMUP !== '0') await run(1); // warm-up (BENCH_WARMUP=0: none)
const all = counts.map(() => []);
for (let r = 0; r < rounds; r++)
  for (let k = 0; k < counts.length; k++) {
    const x = await run(counts[k]);
    all[k].push(x);
    console.error(`round ${r + 1}: streams ${x.streams}: ${x.tok_s.toFixed(2)} tok/s, ${x.rows_per_step.toFixed(2)} rows/step, ` +
      `${x.ms_per_step.toFixed(1)} ms/step`);
  }
const k1 = counts.indexOf(1);
const out = counts.map((c, k) => {
  const runs = all[k];
  const o = { streams: c, tok_s: median(runs.map((x) => x.tok_s)), rows_per_step: median(runs.map((x) => x.rows_per_step)),
    ms_per_step: median(runs.map((x) => x.ms_per_step)),
    // ratio to one stream: per round (same machine state), then the median
    ratio: k1 >= 0 ? median(runs.map((x, r) => x.tok_s / all[k1][r].tok_s)) : null, runs };
  return o;
});
for (const o of out)
  console.log(`streams ${o.streams}: ${o.tok_s.toFixed(2)} tok/s aggregate, ${o.rows_per_step.toFixed(2)} rows/step, ` +
    `${o.ms_per_step.toFixed(1)} ms/step` + (o.ratio !== null ? `, ${o.ratio.toFixed(2)}x single` : '') +
    ` (median of ${o.runs.length})`);
console.log(JSON.stringify({ bench: 'server_decode', tokens_per_stream: nTok, rounds, results: out }));
