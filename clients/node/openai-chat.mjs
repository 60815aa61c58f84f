// Drives camproxy with the official `openai` npm client: a tool call (non-streaming),
// then the tool result with a streamed answer that asks for the usage chunk
// (stream_options.include_usage). Prints what it saw as JSON for the Go
// tests (app/node_client_test.go, app/frameworks_test.go) to check.
import OpenAI from "openai";

const sent = [];
const capturingFetch = async (url, init) => {
  sent.push(typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body));
  return fetch(url, init);
};

const client = new OpenAI({
  baseURL: process.env.CAMPROXY_BASE_URL,
  apiKey: "sk-node-client",
  maxRetries: 0,
  fetch: capturingFetch,
});

const task = process.env.CAMPROXY_TASK;
const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }];
const messages = [
  { role: "system", content: "You are an airline agent." },
  { role: "user", content: task },
];

const first = await client.chat.completions
  .create({ model: "gpt-4o", messages, tools, x_vendor_extension: { keep: [1, 2] } })
  .withResponse();
const msg = first.data.choices[0].message;

messages.push(msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: '{"status":"on time"}' });
const stream = await client.chat.completions
  .create({ model: "gpt-4o", messages, tools, stream: true, stream_options: { include_usage: true } })
  .withResponse();
let content = "";
let chunks = 0;
let usage = null;
let usageChunk = null; // where the include_usage chunk came: {index, choices}
for await (const chunk of stream.data) {
  chunks++;
  if (chunk.choices[0]?.delta?.content) content += chunk.choices[0].delta.content;
  if (chunk.usage) {
    usage = chunk.usage;
    usageChunk = { index: chunks - 1, choices: chunk.choices.length };
  }
}

console.log(JSON.stringify({
  sent,
  toolCall: msg.tool_calls[0],
  headers: [first.response.headers.get("x-cam-context"), stream.response.headers.get("x-cam-context")],
  episodes: [first.response.headers.get("x-cam-episode-id"), stream.response.headers.get("x-cam-episode-id")],
  content,
  chunks,
  usage,
  usageChunk,
  firstUsage: first.data.usage,
}));
