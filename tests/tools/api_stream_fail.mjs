// api_stream_fail.mjs - a Responses stream and a Messages stream that fail after they started end
// with the APIs' failure events, read by the official clients: `response.failed` (openai) and
// an `error` event (@anthropic-ai/sdk throws it as an APIError with Anthropic's error body).
// The failure: the server (Q35_PID, started with --parallel 1 --drain-timeout 0 on the chain
// model) gets SIGTERM while a Messages stream generates (a prefill ending in LOOP repeats
// forever) and a Responses stream waits in the queue behind it.
// Env: Q35_URL, Q35_PID, Q35_CHAIN (chain_model.mjs's JSON line). Exit status 0 = every check passed.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.Q35_URL;
const chain = JSON.parse(process.env.Q35_CHAIN);
const oa = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const an = new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 60000 });

let failures = 0, checks = 0;
function check(cond, what, extra) {
  checks++;
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}${extra !== undefined ? ' ' + JSON.stringify(extra).slice(0, 600) : ''}`);
  }
}

let started;
const firstDelta = new Promise((res) => { started = res; });
const messages = (async () => {
  const types = [];
  try {
    const s = await an.messages.create({ model: 'chain', max_tokens: 30000, stream: true,
      messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'Say it' + chain.loop }] });
    for await (const ev of s) {
      types.push(ev.type);
      if (ev.type === 'content_block_delta') started();
    }
    return { types, error: null };
  } catch (e) {
    return { types, error: e };
  }
})();
await firstDelta;
// queued behind the Messages stream (--parallel 1): the stream has begun (response.created)
const rs = await oa.responses.create({ model: 'chain', input: 'hi', stream: true });
const responses = (async () => {
  const evs = [];
  try {
    for await (const ev of rs) {
      evs.push(ev);
      if (ev.type === 'response.in_progress') process.kill(Number(process.env.Q35_PID), 'SIGTERM');
    }
    return { evs, error: null };
  } catch (e) {
    return { evs, error: e };
  }
})();
const [m, r] = await Promise.all([messages, responses]);

const e = m.error;
check(m.types[0] === 'message_start' && m.types.includes('content_block_delta'), 'the Messages stream had started', m.types);
check(e instanceof Anthropic.APIError, 'the Anthropic client throws the error event', e && String(e));
check(e && e.error && e.error.type === 'error' && e.error.error && e.error.error.type === 'overloaded_error' &&
      /shutting down/.test(e.error.error.message), 'error event: Anthropic shape, overloaded_error, the reason', e && e.error);
check(!m.types.includes('message_stop'), 'no message_stop after the error', m.types);

const types = r.evs.map((x) => x.type);
check(r.error === null, 'the Responses stream ends normally', r.error && String(r.error));
check(types[0] === 'response.created' && types[1] === 'response.in_progress', 'the Responses stream had started', types);
const last = r.evs[r.evs.length - 1];
check(last && last.type === 'response.failed' && last.response.status === 'failed', 'it ends with response.failed', types);
check(last && last.response.error && /shutting down/.test(last.response.error.message), 'response.error names the reason',
      last && last.response);
check(r.evs.every((x, i) => x.sequence_number === i), 'sequence_number counts from 0 through the failure',
      r.evs.map((x) => x.sequence_number));

console.error(`${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
