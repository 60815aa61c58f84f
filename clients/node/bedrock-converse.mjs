// Drives a Bedrock Runtime endpoint (camproxy, or internal/testkit's fake) with the
// official AWS SDK for JavaScript v3: Converse with a tool config and the task, then
// ConverseStream with the tool result. The SDK signs every call with SigV4 for the
// endpoint's host. Prints what it saw as one JSON object for a Go test to check.
//
// Env: CAMPROXY_BASE_URL (endpoint, e.g. http://127.0.0.1:8080), AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN optional), CAMPROXY_TASK,
// CAMPROXY_MODEL_ID (default us.anthropic.claude-3-5-sonnet-20241022-v2:0),
// AWS_REGION (default us-east-1), CAMPROXY_AWS_HTTP1=1 to use HTTP/1.1 instead of the
// SDK's default for Bedrock Runtime, HTTP/2 (h2c with prior knowledge on http://).
import { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand } from "@aws-sdk/client-bedrock-runtime";
import { NodeHttpHandler } from "@smithy/node-http-handler";

const env = process.env;
const client = new BedrockRuntimeClient({
  region: env.AWS_REGION || "us-east-1",
  endpoint: env.CAMPROXY_BASE_URL,
  credentials: {
    accessKeyId: env.AWS_ACCESS_KEY_ID,
    secretAccessKey: env.AWS_SECRET_ACCESS_KEY,
    ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}),
  },
  maxAttempts: 1,
  ...(env.CAMPROXY_AWS_HTTP1 === "1" ? { requestHandler: new NodeHttpHandler() } : {}),
});

// Record each request as signed and sent (path percent-encoded as on the wire, body)
// and each answer's camproxy headers.
const sent = [];
const headers = [];
client.middlewareStack.add(
  (next) => async (args) => {
    const req = args.request;
    sent.push({ method: req.method, path: req.path, body: typeof req.body === "string" ? req.body : new TextDecoder().decode(req.body) });
    const out = await next(args);
    const h = out.response?.headers ?? {};
    headers.push({ context: h["x-cam-context"] ?? null, episode: h["x-cam-episode-id"] ?? null, arm: h["x-cam-arm"] ?? null });
    // Which header names the SDK signed (":authority" over HTTP/2, "host" over HTTP/1.1).
    sent[sent.length - 1].signedHeaders = /SignedHeaders=([^,]+)/.exec(req.headers.authorization ?? "")?.[1] ?? null;
    return out;
  },
  { step: "deserialize", name: "camproxyCapture", priority: "low" },
);

const modelId = env.CAMPROXY_MODEL_ID || "us.anthropic.claude-3-5-sonnet-20241022-v2:0";
const system = [{ text: "You are an airline agent." }];
const toolConfig = {
  tools: [
    {
      toolSpec: {
        name: "lookup_flight",
        description: "Look up a flight's status.",
        inputSchema: { json: { type: "object", properties: { query: { type: "string" }, limit: { type: "integer" } } } },
      },
    },
  ],
};
const messages = [{ role: "user", content: [{ text: env.CAMPROXY_TASK }] }];

const first = await client.send(new ConverseCommand({ modelId, system, messages, toolConfig, inferenceConfig: { maxTokens: 512 } }));
const toolUse = first.output.message.content.find((b) => b.toolUse)?.toolUse ?? null;

messages.push(first.output.message);
messages.push({
  role: "user",
  content: [{ toolResult: { toolUseId: toolUse?.toolUseId, content: [{ json: { status: "on time", gate: "B12" } }] } }],
});
const second = await client.send(new ConverseStreamCommand({ modelId, system, messages, toolConfig }));
const events = [];
let text = "";
let stopReason = null;
let usage = null;
let streamError = null;
try {
  for await (const ev of second.stream) {
    const type = Object.keys(ev).find((k) => ev[k] !== undefined && k !== "$unknown") ?? "$unknown";
    events.push(type);
    if (ev.contentBlockDelta?.delta?.text) text += ev.contentBlockDelta.delta.text;
    if (ev.messageStop) stopReason = ev.messageStop.stopReason;
    if (ev.metadata) usage = ev.metadata.usage;
  }
} catch (err) {
  streamError = { name: err.name, message: err.message };
}

console.log(JSON.stringify({
  sent,
  headers: headers.map((h) => h.context),
  episodes: headers.map((h) => h.episode),
  arms: headers.map((h) => h.arm),
  converse: {
    stopReason: first.stopReason,
    content: first.output.message.content,
    usage: first.usage,
    metrics: first.metrics,
    metadata: first.$metadata,
  },
  toolUse,
  stream: { events, text, stopReason, usage, error: streamError, metadata: second.$metadata },
}));
