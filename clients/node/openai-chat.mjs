// Drives camproxy with the official `openai` npm client: the chat turns of
// openai-turns.mjs (a tool call, then a streamed answer with the usage chunk), the
// first with a vendor extension in its body. Prints what it saw as JSON for the Go
// tests (app/node_client_test.go, app/frameworks_test.go) to check.
import OpenAI from "openai";
import { capturingFetch, chatTurns, report } from "./openai-turns.mjs";

const sent = [];
const client = new OpenAI({
  baseURL: process.env.CAMPROXY_BASE_URL,
  apiKey: "sk-node-client",
  maxRetries: 0,
  fetch: capturingFetch(sent),
});

const out = await chatTurns(client, process.env.CAMPROXY_TASK, { x_vendor_extension: { keep: [1, 2] } });
await report(sent, out);
