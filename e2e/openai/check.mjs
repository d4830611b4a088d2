// Drives swarmd's OpenAI-compatible API with the official openai client.
// Usage: node check.mjs http://127.0.0.1:PORT
// Prints one JSON object with what it saw; exits non-zero on any failure.
import OpenAI from "openai";

const base = process.argv[2];
if (!base) {
  console.error("usage: node check.mjs BASE_URL");
  process.exit(2);
}
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
const out = {};

function fail(msg) {
  console.error("FAIL: " + msg);
  process.exit(1);
}

// Models.
const models = await client.models.list();
out.models = models.data.map((m) => m.id);
if (!out.models.includes("swarm")) fail("GET /v1/models lacks 'swarm': " + out.models);

// Non-streaming.
const chat = await client.chat.completions.create({
  model: "swarm",
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "What is the capital of France?" }],
  max_tokens: 8,
});
out.content = chat.choices[0].message.content;
out.finish_reason = chat.choices[0].finish_reason;
out.usage = chat.usage;
if (typeof out.content !== "string" || out.content.length === 0) fail("empty non-streaming answer");
if (chat.object !== "chat.completion") fail("object is " + chat.object);

// Streaming.
const stream = await client.chat.completions.create({
  model: "reasoner",
  messages: [{ role: "user", content: "Count to three." }],
  max_tokens: 8,
  stream: true,
});
let text = "";
let chunks = 0;
let finish = null;
for await (const chunk of stream) {
  chunks++;
  const c = chunk.choices[0];
  if (c.delta && c.delta.content) text += c.delta.content;
  if (c.finish_reason) finish = c.finish_reason;
}
out.stream_text = text;
out.stream_chunks = chunks;
out.stream_finish = finish;
if (text.length === 0) fail("empty streamed answer");
// 8 tokens asked: the answer ends by hitting the limit ("length") unless the model stopped first.
if (finish !== "length" && finish !== "stop") fail("stream ended with finish_reason " + finish);
if (!["length", "stop"].includes(out.finish_reason)) fail("finish_reason " + out.finish_reason);

// Errors surface as APIError with the status and message.
async function expectError(name, fn, status) {
  try {
    await fn();
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) fail(name + ": not an APIError: " + e);
    if (e.status !== status) fail(name + ": status " + e.status + ", want " + status);
    out[name] = { status: e.status, message: e.message };
    return;
  }
  fail(name + ": no error");
}
await expectError("empty_messages", () => client.chat.completions.create({ model: "swarm", messages: [] }), 400);
await expectError("unknown_model", () =>
  client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }), 404);
await expectError("bad_temperature", () =>
  client.chat.completions.create({ model: "swarm", temperature: 9, messages: [{ role: "user", content: "hi" }] }), 400);

console.log(JSON.stringify(out));
