// A LangChain agent (@langchain/openai ChatOpenAI bound to one tool, lookup_flight)
// doing a two-request conversation through camproxy's OpenAI chat-completions route (or
// internal/testkit's fake): for each user request the loop calls the model, runs the
// tools it asked for, and calls the model again until it answers in text. The first
// request uses invoke(); the second uses stream() (deltas concatenated into one message,
// tool-call fragments included), so one conversation has both. Every call resends the
// whole history. Prints what it saw as one JSON object for app/frameworks_test.go.
//
// Env: CAMPROXY_BASE_URL (the OpenAI base URL including /v1), CAMPROXY_TASK (the first
// request), CAMPROXY_FOLLOWUP (the second), OPENAI_API_KEY (default sk-langchain-client),
// CAMPROXY_MODEL (default gpt-4o).
import { ChatOpenAI } from "@langchain/openai";
import { tool } from "@langchain/core/tools";
import { HumanMessage, SystemMessage } from "@langchain/core/messages";
import { z } from "zod";

const env = process.env;

// Every HTTP call as the framework made it, and camproxy's answer headers.
const calls = [];
const capturingFetch = async (url, init) => {
  const body = typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body);
  const h = new Headers(init.headers);
  const res = await fetch(url, init);
  calls.push({
    path: new URL(url).pathname,
    body,
    userAgent: h.get("user-agent"),
    stainless: [...h.keys()].filter((k) => k.startsWith("x-stainless")).sort(),
    status: res.status,
    context: res.headers.get("x-cam-context"),
    episode: res.headers.get("x-cam-episode-id"),
    arm: res.headers.get("x-cam-arm"),
  });
  return res;
};

const toolInputs = [];
const lookupFlight = tool(
  async (input) => {
    toolInputs.push(input);
    return JSON.stringify({ flight: "UA12", status: "on time", gate: "B12" });
  },
  {
    name: "lookup_flight",
    description: "Look up the status of a flight.",
    schema: z.object({ query: z.string(), limit: z.number().int().optional() }),
  },
);

const model = new ChatOpenAI({
  model: env.CAMPROXY_MODEL || "gpt-4o",
  apiKey: env.OPENAI_API_KEY || "sk-langchain-client",
  maxRetries: 0,
  configuration: { baseURL: env.CAMPROXY_BASE_URL, fetch: capturingFetch },
}).bindTools([lookupFlight]);

const messages = [new SystemMessage("You are an airline agent. Use lookup_flight before answering.")];
let modelCalls = 0;
let toolCalls = 0;
const stream = { calls: 0, chunks: 0, textDeltas: 0, toolCallChunks: 0, usage: null };

async function callModel(streamed) {
  modelCalls++;
  if (!streamed) return model.invoke(messages);
  stream.calls++;
  let full;
  for await (const chunk of await model.stream(messages)) {
    stream.chunks++;
    if (typeof chunk.content === "string" && chunk.content !== "") stream.textDeltas++;
    stream.toolCallChunks += chunk.tool_call_chunks?.length ?? 0;
    full = full === undefined ? chunk : full.concat(chunk);
  }
  if (full?.usage_metadata) stream.usage = full.usage_metadata;
  return full;
}

// The agent loop: model → tools → model until the model answers without a tool call.
async function request(text, streamed) {
  messages.push(new HumanMessage(text));
  for (let step = 0; step < 5; step++) {
    const ai = await callModel(streamed);
    messages.push(ai);
    if (!ai.tool_calls?.length) return typeof ai.content === "string" ? ai.content : JSON.stringify(ai.content);
    for (const tc of ai.tool_calls) {
      toolCalls++;
      messages.push(await lookupFlight.invoke(tc)); // a ToolCall in, a ToolMessage out
    }
  }
  throw new Error("agent loop did not finish in 5 steps");
}

const answers = [];
answers.push(await request(env.CAMPROXY_TASK || "Is flight UA12 on time?", false));
answers.push(await request(env.CAMPROXY_FOLLOWUP || "Check it once more and tell me the gate.", true));

console.log(JSON.stringify({
  answers,
  modelCalls,
  toolCalls,
  toolInputs,
  stream,
  messages: messages.length,
  sent: calls.map((c) => c.body),
  paths: calls.map((c) => c.path),
  status: calls.map((c) => c.status),
  headers: calls.map((c) => c.context),
  episodes: calls.map((c) => c.episode),
  arms: calls.map((c) => c.arm),
  userAgent: calls[0]?.userAgent ?? null,
  stainless: calls[0]?.stainless ?? [],
}));
