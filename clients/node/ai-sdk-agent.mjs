// A Vercel AI SDK agent (`ai` + `@ai-sdk/openai`) with one tool, lookup_flight, doing a
// two-request conversation through camproxy's OpenAI chat-completions route (or
// internal/testkit's fake). The model is `openai.chat(...)`: chat completions, not the
// Responses API that `openai(...)` would use. The first request runs generateText with
// stopWhen: stepCountIs(5) (the SDK's own loop: model → tool → model); the second, with
// the first's messages as history, runs streamText the same way. Prints what it saw as
// one JSON object for app/frameworks_test.go.
//
// Env: CAMPROXY_BASE_URL (the OpenAI base URL including /v1), CAMPROXY_TASK (the first
// request), CAMPROXY_FOLLOWUP (the second), OPENAI_API_KEY (default sk-ai-sdk-client),
// CAMPROXY_MODEL (default gpt-4o).
import { generateText, streamText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { agentSettings, stepsOf } from "./ai-sdk-tools.mjs";

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
    status: res.status,
    context: res.headers.get("x-cam-context"),
    episode: res.headers.get("x-cam-episode-id"),
    arm: res.headers.get("x-cam-arm"),
  });
  return res;
};

const openai = createOpenAI({
  baseURL: env.CAMPROXY_BASE_URL,
  apiKey: env.OPENAI_API_KEY || "sk-ai-sdk-client",
  fetch: capturingFetch,
});
const model = openai.chat(env.CAMPROXY_MODEL || "gpt-4o");

const toolInputs = [];
const common = agentSettings(model, toolInputs);

// Request 1: generateText runs the whole tool loop.
const messages = [{ role: "user", content: env.CAMPROXY_TASK || "Is flight UA12 on time?" }];
const first = await generateText({ ...common, messages });
messages.push(...first.response.messages);

// Request 2: the same loop, streamed.
messages.push({ role: "user", content: env.CAMPROXY_FOLLOWUP || "Check it once more and tell me the gate." });
const second = streamText({ ...common, messages });
const parts = {};
let text = "";
const errors = [];
for await (const part of second.fullStream) {
  parts[part.type] = (parts[part.type] ?? 0) + 1;
  if (part.type === "text-delta") text += part.text;
  if (part.type === "error" || part.type === "tool-error") errors.push(String(part.error?.message ?? part.error));
}
const secondSteps = await second.steps;

console.log(JSON.stringify({
  answers: [first.text, text],
  generate: { steps: stepsOf(first.steps), finishReason: first.finishReason },
  stream: { steps: stepsOf(secondSteps), parts, textDeltas: parts["text-delta"] ?? 0, usage: await second.totalUsage, errors },
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
