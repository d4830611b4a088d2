// Drives swarmd's OpenAI-compatible API with the official openai client:
// every request field the swarm honours or refuses, streamed and not, for
// chat completions and raw completions.
// Usage: node check.mjs http://127.0.0.1:PORT (a peer serving reasoner,
// concise and aggregator, with no writer); or node check.mjs BASE_URL
// reasoning ANSWER REASONING (a reasoner that writes its reasoning apart:
// the client reads message.reasoning_content and streamed
// delta.reasoning_content, and nothing else is checked).
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

// ask runs one chat completion, streamed or not, and returns what came back.
async function ask(params, stream) {
  if (!stream) {
    const c = await client.chat.completions.create(params);
    if (c.object !== "chat.completion") fail("object is " + c.object);
    return { text: c.choices[0].message.content, finish: c.choices[0].finish_reason, usage: c.usage };
  }
  const s = await client.chat.completions.create({ ...params, stream: true });
  let text = "", finish = null, usage = null, chunks = 0, last = null;
  for await (const chunk of s) {
    chunks++;
    last = chunk;
    if (chunk.object !== "chat.completion.chunk") fail("chunk object is " + chunk.object);
    const c = chunk.choices[0];
    if (c && c.delta && c.delta.content) text += c.delta.content;
    if (c && c.finish_reason) finish = c.finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, finish, usage, chunks, last };
}

// expectError checks that fn fails with an APIError of this status whose
// message contains want.
async function expectError(name, fn, status, want) {
  try {
    await fn();
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) fail(name + ": not an APIError: " + e);
    if (e.status !== status) fail(name + ": status " + e.status + ", want " + status + ": " + e.message);
    if (want && !e.message.includes(want)) fail(name + ": message " + JSON.stringify(e.message) + " lacks " + JSON.stringify(want));
    out[name] = { status: e.status, message: e.message };
    return;
  }
  fail(name + ": no error");
}

// A stop string the model really produced: two runes from the second half
// of text, neither a replacement character (a synthetic model's text is
// not always valid UTF-8).
function stopIn(text) {
  const r = Array.from(text);
  for (let i = Math.floor(r.length / 2); i + 1 < r.length; i++) {
    if (r[i] !== "\uFFFD" && r[i + 1] !== "\uFFFD") return r[i] + r[i + 1];
  }
  fail("no stop string to pick in " + JSON.stringify(text));
}

const user = (content) => [{ role: "user", content }];

// The model's reasoning, apart from its answer, as llama.cpp's server and
// vLLM give it: fields the client's types do not name, read as they come.
if (process.argv[3] === "reasoning") {
  const [want, thought] = process.argv.slice(4, 6);
  const params = { model: "reasoner", messages: user("The capital of France?"), max_tokens: 64 };
  const c = await client.chat.completions.create(params);
  const m = c.choices[0].message;
  if (m.content !== want || m.reasoning_content !== thought) fail("message: " + JSON.stringify(m));
  const s = await client.chat.completions.create({ ...params, stream: true });
  let text = "", reasoning = "";
  for await (const chunk of s) {
    const d = chunk.choices[0] && chunk.choices[0].delta;
    if (d && d.content) text += d.content;
    if (d && d.reasoning_content) reasoning += d.reasoning_content;
  }
  if (text !== want || reasoning !== thought) fail("streamed: content " + JSON.stringify(text) + ", reasoning_content " + JSON.stringify(reasoning));
  console.log(JSON.stringify({ message: m, streamed: { content: text, reasoning_content: reasoning } }));
  process.exit(0);
}

// Models, listed and one by one.
const models = await client.models.list();
out.models = models.data.map((m) => m.id);
if (!out.models.includes("swarm") || !out.models.includes("reasoner")) fail("GET /v1/models: " + out.models);
const one = await client.models.retrieve("reasoner");
if (one.id !== "reasoner") fail("GET /v1/models/reasoner: " + JSON.stringify(one));
await expectError("retrieve_unknown_model", () => client.models.retrieve("no-such-model"), 404, "no-such-model");

// The mixture answers, as before.
const chat = await ask({
  model: "swarm",
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "What is the capital of France?" }],
  max_tokens: 8,
}, false);
out.content = chat.text;
out.finish_reason = chat.finish;
if (typeof chat.text !== "string" || chat.text.length === 0) fail("empty non-streaming answer");
if (!["length", "stop"].includes(chat.finish)) fail("finish_reason " + chat.finish);

for (const stream of [false, true]) {
  const tag = stream ? "stream" : "whole";
  const params = { model: "reasoner", messages: user("Count to three."), max_tokens: 16 };
  const greedy = await ask({ ...params, temperature: 0 }, stream);
  if (greedy.text.length === 0) fail(tag + ": empty greedy answer");
  if (greedy.finish !== "length" && greedy.finish !== "stop") fail(tag + ": finish_reason " + greedy.finish);

  // seed: reproducible; no seed at the default temperature: fresh samples.
  const s1 = await ask({ ...params, temperature: 1, seed: 1234 }, stream);
  const s2 = await ask({ ...params, temperature: 1, seed: 1234 }, stream);
  if (s1.text !== s2.text) fail(tag + ": same seed, different answers: " + JSON.stringify([s1.text, s2.text]));
  const m1 = await ask({ model: "swarm", messages: user("Who wrote Hamlet?"), max_tokens: 8, seed: 99 }, stream);
  const m2 = await ask({ model: "swarm", messages: user("Who wrote Hamlet?"), max_tokens: 8, seed: 99 }, stream);
  if (m1.text !== m2.text) fail(tag + ": mixture, same seed, different answers");
  const fresh = new Set();
  for (let i = 0; i < 3; i++) fresh.add((await ask(params, stream)).text);
  if (fresh.size < 2) fail(tag + ": no seed, yet the same answer three times: " + [...fresh]);
  out[tag + "_seed"] = { same_seed: s1.text, fresh_answers: fresh.size };

  // stop: a string, a list, null.
  const stop = stopIn(greedy.text);
  const want = greedy.text.slice(0, greedy.text.indexOf(stop));
  for (const s of [stop, ["never said", stop]]) {
    const r = await ask({ ...params, temperature: 0, stop: s }, stream);
    if (r.text !== want || r.finish !== "stop") {
      fail(tag + ": stop " + JSON.stringify(s) + ": " + JSON.stringify(r.text) + " (" + r.finish + "), want " + JSON.stringify(want));
    }
  }
  const nostop = await ask({ ...params, temperature: 0, stop: null }, stream);
  if (nostop.text !== greedy.text) fail(tag + ": stop null changed the answer");
  out[tag + "_stop"] = { stop, text: want };

  // Metadata OpenAI documents as optional: accepted and ignored.
  const meta = await ask({ ...params, temperature: 0, user: "u-1", metadata: { k: "v" }, store: false, n: 1 }, stream);
  if (meta.text !== greedy.text) fail(tag + ": user/metadata/store changed the answer");

  // Refused, each by name, with the real status even when streaming.
  const refuse = (name, extra, status, want) =>
    expectError(tag + "_" + name, () => ask({ ...params, ...extra }, stream), status, want);
  await refuse("logprobs", { logprobs: true }, 400, "logprobs");
  await refuse("top_logprobs", { top_logprobs: 2 }, 400, "top_logprobs");
  await refuse("n", { n: 2 }, 400, "n=2");
  await refuse("unknown_field", { colour: "blue" }, 400, 'unknown field "colour"');
  await refuse("json_schema", { response_format: { type: "json_schema", json_schema: { name: "x", schema: {} } } }, 400, "json_schema");
  // json_object is checked, not constrained: a synthetic model's text is no JSON.
  await refuse("json_object", { temperature: 0, response_format: { type: "json_object" } }, 502, "not a JSON object");
  await refuse("no_writer", { model: "writer" }, 503, "no live peer serves writer");
  await refuse("prompt_too_long", { messages: user("swarm ".repeat(6000)) }, 400, "context");
}

// stream_options.include_usage: the last chunk carries the usage.
const u = await ask({ model: "reasoner", messages: user("Count to three."), max_tokens: 8, stream_options: { include_usage: true } }, true);
if (!u.usage || u.usage.completion_tokens < 1 || u.usage.total_tokens !== u.usage.prompt_tokens + u.usage.completion_tokens) {
  fail("include_usage: " + JSON.stringify(u.last));
}
if (u.last.choices.length !== 0) fail("include_usage: the usage chunk has choices");
out.stream_usage = u.usage;
const nu = await ask({ model: "reasoner", messages: user("Count to three."), max_tokens: 8 }, true);
if (nu.usage) fail("usage sent without include_usage");

await expectError("empty_messages", () => client.chat.completions.create({ model: "swarm", messages: [] }), 400);
await expectError("unknown_model", () =>
  client.chat.completions.create({ model: "no-such-model", messages: user("hi") }), 404);
await expectError("bad_temperature", () =>
  client.chat.completions.create({ model: "swarm", temperature: 9, messages: user("hi") }), 400, "temperature");

// Raw completion (POST /v1/completions): a role's model continues the
// prompt as it is, streamed or not; echo=true is refused by name.
for (const stream of [false, true]) {
  const tag = "completion_" + (stream ? "stream" : "whole");
  const params = { model: "reasoner", prompt: "Once upon a time", max_tokens: 8, temperature: 0 };
  let text = "", finish = null;
  if (!stream) {
    const c = await client.completions.create(params);
    if (c.object !== "text_completion") fail(tag + ": object is " + c.object);
    text = c.choices[0].text;
    finish = c.choices[0].finish_reason;
    if (!c.usage || c.usage.completion_tokens < 1) fail(tag + ": usage " + JSON.stringify(c.usage));
  } else {
    const s = await client.completions.create({ ...params, stream: true });
    for await (const chunk of s) {
      if (chunk.object !== "text_completion") fail(tag + ": chunk object is " + chunk.object);
      const c = chunk.choices[0];
      if (c && c.text) text += c.text;
      if (c && c.finish_reason) finish = c.finish_reason;
    }
  }
  if (text.length === 0) fail(tag + ": empty completion");
  if (finish !== "length" && finish !== "stop") fail(tag + ": finish_reason " + finish);
  out[tag] = { text, finish };
  const again = await client.completions.create({ ...params, seed: 7 });
  if (again.choices[0].text !== (stream ? text : out.completion_whole.text)) fail(tag + ": greedy completion differs");
  await expectError(tag + "_echo", () => client.completions.create({ ...params, echo: true, stream }), 400, "echo");
  await expectError(tag + "_unknown_field", () => client.completions.create({ ...params, colour: "blue", stream }), 400, 'unknown field "colour"');
}

console.log(JSON.stringify(out));
