// An @openai/agents (OpenAI Agents SDK for JavaScript) agent with one tool,
// lookup_flight, doing a two-run conversation through camproxy's OpenAI Responses
// route (POST /v1/responses; or internal/testkit's fake). The SDK's default OpenAI
// client is an `openai` client whose base URL is camproxy; tracing is off (nothing
// leaves the machine). Run 1 sends the task and loops model → tool → model, re-sending
// the whole history each turn; run 2 continues on the provider's side with
// previousResponseId (only new items are sent) and streams, again model → tool →
// model. Prints what it saw as one JSON object for app/agents_test.go.
//
// Env: CAMPROXY_BASE_URL (the OpenAI base URL including /v1), CAMPROXY_TASK (run 1),
// CAMPROXY_FOLLOWUP (run 2), OPENAI_API_KEY (default sk-agents-client), CAMPROXY_MODEL
// (default gpt-4.1).
import OpenAI from "openai";
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import { z } from "zod";

const env = process.env;

// Every HTTP call as the SDK made it, and camproxy's answer headers.
const calls = [];
const capturingFetch = async (url, init) => {
  const body = typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body);
  const h = new Headers(init.headers);
  const res = await fetch(url, init);
  calls.push({
    path: new URL(url).pathname,
    body,
    userAgent: h.get("user-agent"),
    status: res.status,
    context: res.headers.get("x-cam-context"),
    episode: res.headers.get("x-cam-episode-id"),
    arm: res.headers.get("x-cam-arm"),
  });
  return res;
};

setTracingDisabled(true);
setOpenAIAPI("responses");
setDefaultOpenAIClient(new OpenAI({
  baseURL: env.CAMPROXY_BASE_URL,
  apiKey: env.OPENAI_API_KEY || "sk-agents-client",
  fetch: capturingFetch,
  maxRetries: 0,
}));

const toolInputs = [];
const lookupFlight = tool({
  name: "lookup_flight",
  description: "Look up the status of a flight.",
  parameters: z.object({ query: z.string(), limit: z.number().int().nullable() }),
  execute: async (input) => {
    toolInputs.push(input);
    return JSON.stringify({ flight: "UA12", status: "on time", gate: "B12" });
  },
});

const agent = new Agent({
  name: "Airline agent",
  instructions: "You are an airline agent. Use lookup_flight before answering.",
  model: env.CAMPROXY_MODEL || "gpt-4.1",
  tools: [lookupFlight],
});

// Run 1: the whole history each turn.
const first = await run(agent, env.CAMPROXY_TASK || "Is flight UA12 on time?");

// Run 2: the provider keeps the conversation; streamed.
const second = await run(agent, env.CAMPROXY_FOLLOWUP || "Check it once more and tell me the gate.", {
  previousResponseId: first.lastResponseId,
  stream: true,
});
const events = {};
let text = "";
for await (const ev of second) {
  const key = ev.type === "raw_model_stream_event" ? `raw:${ev.data.type}` : ev.type === "run_item_stream_event" ? `item:${ev.name}` : ev.type;
  events[key] = (events[key] ?? 0) + 1;
  if (ev.type === "raw_model_stream_event" && ev.data.type === "output_text_delta") text += ev.data.delta;
}
await second.completed;

console.log(JSON.stringify({
  answers: [first.finalOutput, second.finalOutput],
  streamedText: text,
  events,
  responseIds: [first.lastResponseId, second.lastResponseId],
  toolInputs,
  toolCalls: toolInputs.length,
  sent: calls.map((c) => c.body),
  paths: calls.map((c) => c.path),
  status: calls.map((c) => c.status),
  headers: calls.map((c) => c.context),
  episodes: calls.map((c) => c.episode),
  arms: calls.map((c) => c.arm),
  userAgent: calls[0]?.userAgent ?? null,
}));
