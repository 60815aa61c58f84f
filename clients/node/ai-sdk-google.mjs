// A Vercel AI SDK agent (`ai` + `@ai-sdk/google`) with one tool, lookup_flight, doing a
// two-request conversation against a Gemini API endpoint (camproxy, or
// internal/testkit's fake). The provider is set up only by its documented base URL
// setting, createGoogleGenerativeAI({ baseURL }) with baseURL = endpoint + "/v1beta",
// and the API key. Request 1 runs generateText with stopWhen: stepCountIs(5) (the SDK's
// own loop: model → tool → model, each a :generateContent); request 2, with the first's
// messages as history and a follow-up, runs streamText the same way (each a
// :streamGenerateContent?alt=sse). Prints what it saw as one JSON object for
// app/gemini_test.go.
//
// Env: CAMPROXY_BASE_URL (the provider's baseURL, including /v1beta), CAMPROXY_TASK,
// CAMPROXY_FOLLOWUP, GOOGLE_GENERATIVE_AI_API_KEY (default gm-ai-sdk-client: the
// provider sends it as x-goog-api-key), CAMPROXY_MODEL (default gemini-2.5-flash).
import { generateText, streamText } from "ai";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { agentSettings, stepsOf } from "./ai-sdk-tools.mjs";

const env = process.env;

// The bodies as the provider sent them, and their paths.
const sent = [];
const paths = [];
const capturingFetch = async (url, init) => {
  sent.push(typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body));
  const u = new URL(url);
  paths.push(u.pathname + u.search);
  return fetch(url, init);
};

const google = createGoogleGenerativeAI({
  baseURL: env.CAMPROXY_BASE_URL,
  apiKey: env.GOOGLE_GENERATIVE_AI_API_KEY || "gm-ai-sdk-client",
  fetch: capturingFetch,
});
const model = google(env.CAMPROXY_MODEL || "gemini-2.5-flash");

const toolInputs = [];
const common = agentSettings(model, toolInputs);

const out = { answers: [], sent, paths, toolInputs, errors: [] };
try {
  // Request 1: generateText runs the whole tool loop.
  const messages = [{ role: "user", content: env.CAMPROXY_TASK || "Is flight UA12 on time?" }];
  const first = await generateText({ ...common, messages });
  messages.push(...first.response.messages);
  out.answers.push(first.text);
  out.generate = { steps: stepsOf(first.steps) };

  // Request 2: the same loop, streamed.
  messages.push({ role: "user", content: env.CAMPROXY_FOLLOWUP || "Check it once more and tell me the gate." });
  const second = streamText({ ...common, messages });
  let text = "";
  for await (const part of second.fullStream) {
    if (part.type === "text-delta") text += part.text;
    if (part.type === "error" || part.type === "tool-error") out.errors.push(String(part.error?.message ?? part.error));
  }
  out.answers.push(text);
  out.stream = { steps: stepsOf(await second.steps) };
} catch (err) {
  out.errors.push(String(err?.message || err));
}
console.log(JSON.stringify(out));
