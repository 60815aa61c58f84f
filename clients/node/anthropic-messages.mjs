// Drives an Anthropic Messages endpoint (camproxy, or internal/testkit's fake) with
// the official `@anthropic-ai/sdk`: a tool call (non-streaming), then the tool result
// with a streamed answer. Prints what it saw as one JSON object for a Go test to check.
//
// Env: CAMPROXY_BASE_URL (the root: the SDK appends /v1/messages), CAMPROXY_TASK,
// ANTHROPIC_API_KEY (default sk-ant-node-client), CAMPROXY_MODEL (default
// claude-sonnet-4-5).
import Anthropic from "@anthropic-ai/sdk";

const sent = [];
const capturingFetch = async (url, init) => {
  sent.push(typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body));
  return fetch(url, init);
};

const client = new Anthropic({
  baseURL: process.env.CAMPROXY_BASE_URL,
  apiKey: process.env.ANTHROPIC_API_KEY || "sk-ant-node-client",
  maxRetries: 0,
  fetch: capturingFetch,
});

const model = process.env.CAMPROXY_MODEL || "claude-sonnet-4-5";
const system = "You are an airline agent.";
const tools = [
  {
    name: "lookup_flight",
    description: "Look up a flight's status.",
    input_schema: { type: "object", properties: { query: { type: "string" }, limit: { type: "integer" } } },
  },
];
const messages = [{ role: "user", content: process.env.CAMPROXY_TASK }];

const first = await client.messages.create({ model, max_tokens: 512, system, messages, tools }).withResponse();
const toolUse = first.data.content.find((b) => b.type === "tool_use") ?? null;

messages.push({ role: "assistant", content: first.data.content });
messages.push({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: toolUse?.id, content: '{"status":"on time","gate":"B12"}' }],
});
const second = await client.messages.create({ model, max_tokens: 512, system, messages, tools, stream: true }).withResponse();
const events = [];
let content = "";
let toolInput = "";
let stopReason = null;
let usage = null;
let streamError = null;
try {
  for await (const ev of second.data) {
    events.push(ev.type);
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") content += ev.delta.text;
    if (ev.type === "content_block_delta" && ev.delta.type === "input_json_delta") toolInput += ev.delta.partial_json;
    if (ev.type === "message_start") usage = { ...ev.message.usage };
    if (ev.type === "message_delta") {
      stopReason = ev.delta.stop_reason;
      usage = { ...usage, ...ev.usage };
    }
  }
} catch (err) {
  streamError = { name: err.constructor?.name, message: err.message };
}

const hdr = (r, name) => r.response.headers.get(name);
console.log(JSON.stringify({
  sent,
  first: { id: first.data.id, stopReason: first.data.stop_reason, content: first.data.content, usage: first.data.usage, requestId: first.request_id ?? hdr(first, "request-id") },
  toolUse,
  stream: { events, content, toolInput, stopReason, usage, error: streamError },
  headers: [hdr(first, "x-cam-context"), hdr(second, "x-cam-context")],
  episodes: [hdr(first, "x-cam-episode-id"), hdr(second, "x-cam-episode-id")],
  arms: [hdr(first, "x-cam-arm"), hdr(second, "x-cam-arm")],
}));
