// openai_client.js — the official OpenAI JavaScript client (npm package openai) against a
// running `attn serve`: one non-streamed and one streamed completion, printed as JSON
// {"plain": {...}, "streamed": {"texts": {...}, "finish_reasons": {...}, "usage": {...}}}.
//   node openai_client.js NODE_MODULES BASE_URL MODEL PROMPT
// Retries are off (maxRetries 0): a failure must show, not be retried away.
const path = require("path");
const [modules, baseURL, model, prompt] = process.argv.slice(2);
const OpenAI = require(path.join(modules, "openai"));

async function main() {
  const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
  const body = { model, prompt, temperature: 0, max_tokens: 20, n: 1 };
  const plain = await client.completions.create(body);
  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const texts = {}, reasons = {};
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] || "") + c.text;
      if (c.finish_reason !== null) reasons[c.index] = c.finish_reason;
    }
  }
  let error = null;
  try {
    await client.completions.create({ ...body, model: "no-such-model" });
  } catch (e) {
    error = { status: e.status, param: e.param, code: e.code, name: e.constructor.name };
  }
  console.log(JSON.stringify({ plain, streamed: { texts, finish_reasons: reasons, usage }, error }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
