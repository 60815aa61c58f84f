// Drives camproxy with the `openai` npm package's AzureOpenAI client, configured as
// Azure's docs configure it: the resource endpoint (AZURE_OPENAI_ENDPOINT, read by
// the client itself), an api key, an api version and a deployment. A tool call
// (non-streaming), then the tool result with a streamed answer. Prints what it saw
// as JSON for app/azure_test.go.
import { AzureOpenAI } from "openai";

const sent = [];
const capturingFetch = async (url, init) => {
  sent.push({ url: String(url), body: typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body) });
  return fetch(url, init);
};

const client = new AzureOpenAI({
  apiKey: "az-client-key",
  apiVersion: "2024-10-21",
  deployment: "gpt4-deploy",
  maxRetries: 0,
  fetch: capturingFetch,
});

const task = process.env.CAMPROXY_TASK;
const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }];
const messages = [
  { role: "system", content: "You are an airline agent." },
  { role: "user", content: task },
];

const first = await client.chat.completions.create({ model: "gpt-4o", messages, tools }).withResponse();
const msg = first.data.choices[0].message;

messages.push(msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: '{"status":"on time"}' });
const stream = await client.chat.completions
  .create({ model: "gpt-4o", messages, tools, stream: true, stream_options: { include_usage: true } })
  .withResponse();
let content = "";
for await (const chunk of stream.data) {
  if (chunk.choices[0]?.delta?.content) content += chunk.choices[0].delta.content;
}

console.log(JSON.stringify({
  sent,
  toolCall: msg.tool_calls[0],
  headers: [first.response.headers.get("x-cam-context"), stream.response.headers.get("x-cam-context")],
  episodes: [first.response.headers.get("x-cam-episode-id"), stream.response.headers.get("x-cam-episode-id")],
  content,
}));
