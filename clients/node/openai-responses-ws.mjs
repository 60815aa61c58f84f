// The openai npm package's Responses WebSocket client (ResponsesWS, WebSocket mode:
// one socket, a response.create per turn) doing a tool loop through camproxy, set up
// only by its base URL. Turn 1 sends the task with one tool, lookup_flight; every
// later turn continues the previous response with previous_response_id and only the
// new items (the tool's output, then a follow-up question, then that tool output), as
// WebSocket mode is meant to be used. store is false: the provider keeps nothing, so
// each continuation must reach it whole. Prints what it saw as one JSON object for
// app/responses_ws_test.go.
//
// Env: CAMPROXY_BASE_URL (the OpenAI base URL including /v1), CAMPROXY_TASK,
// CAMPROXY_FOLLOWUP, OPENAI_API_KEY (default sk-ws-client), CAMPROXY_MODEL (default gpt-5).
import OpenAI from "openai";
import { ResponsesWS } from "openai/resources/responses/ws";

const env = process.env;
const model = env.CAMPROXY_MODEL || "gpt-5";
const client = new OpenAI({ baseURL: env.CAMPROXY_BASE_URL, apiKey: env.OPENAI_API_KEY || "sk-ws-client", maxRetries: 0 });
const tools = [{
  type: "function", name: "lookup_flight", description: "Look up the status of a flight.", strict: false,
  parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
}];

const ws = new ResponsesWS(client);
const errors = [];
ws.on("error", (err) => errors.push(String(err?.message ?? err)));

await new Promise((resolve, reject) => {
  if (ws.socket.readyState === 1) return resolve();
  ws.socket.on("open", resolve);
  ws.socket.on("error", reject);
  ws.socket.on("close", () => reject(new Error("socket closed before it opened")));
});

// One response: send the create event, collect events until the response ends.
function respond(input, previous) {
  return new Promise((resolve, reject) => {
    const seen = { types: [], text: "", calls: [] };
    const onEvent = (ev) => {
      seen.types.push(ev.type);
      if (ev.type === "response.output_text.delta") seen.text += ev.delta;
      if (ev.type === "response.output_item.done" && ev.item.type === "function_call") seen.calls.push(ev.item);
      if (ev.type === "error") { done(); reject(new Error("error event: " + JSON.stringify(ev))); }
      if (ev.type === "response.completed") { seen.id = ev.response.id; done(); resolve(seen); }
      if (ev.type === "response.failed" || ev.type === "response.incomplete") { done(); reject(new Error(ev.type)); }
    };
    const done = () => ws.off("event", onEvent);
    ws.on("event", onEvent);
    ws.send({ type: "response.create", model, store: false, instructions: "You are an airline agent. Use lookup_flight before answering.",
      tools, input, ...(previous ? { previous_response_id: previous } : {}) });
  });
}

// A tool loop: answer each function call with its output until the model answers in text.
async function loop(input, previous, responses) {
  for (;;) {
    const r = await respond(input, previous);
    responses.push(r);
    previous = r.id;
    if (r.calls.length === 0) return previous;
    input = r.calls.map((c) => ({ type: "function_call_output", call_id: c.call_id,
      output: JSON.stringify({ flight: "UA12", status: "on time", gate: "B12" }) }));
  }
}

const responses = [];
let out;
try {
  const prev = await loop([{ role: "user", content: env.CAMPROXY_TASK }], null, responses);
  await loop([{ role: "user", content: env.CAMPROXY_FOLLOWUP }], prev, responses);
  out = { responses, errors };
} catch (err) {
  out = { responses, errors: [...errors, String(err?.message ?? err)] };
} finally {
  ws.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
