// A LangGraph agent (@langchain/langgraph's prebuilt createReactAgent over
// @langchain/openai's ChatOpenAI, one tool, lookup_flight, a system prompt) doing one
// task through camproxy's OpenAI chat-completions route (or internal/testkit's fake),
// then a follow-up in the same thread (a MemorySaver checkpointer keeps the history).
// The graph loops model → tools → model until the model answers in text. Prints what
// it saw as one JSON object for app/coding_agents_test.go.
//
// Env: CAMPROXY_BASE_URL (the OpenAI base URL including /v1), CAMPROXY_TASK,
// CAMPROXY_FOLLOWUP, OPENAI_API_KEY (default sk-langgraph-client), CAMPROXY_MODEL
// (default gpt-4o).
import { ChatOpenAI } from "@langchain/openai";
import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { MemorySaver } from "@langchain/langgraph";
import { z } from "zod";

const env = process.env;

const calls = [];
const capturingFetch = async (url, init) => {
  const body = typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body);
  const res = await fetch(url, init);
  calls.push({
    path: new URL(url).pathname,
    body,
    status: res.status,
    context: res.headers.get("x-cam-context"),
    episode: res.headers.get("x-cam-episode-id"),
  });
  return res;
};

let toolCalls = 0;
const lookupFlight = tool(
  async () => {
    toolCalls++;
    return JSON.stringify({ flight: "UA12", status: "on time", gate: "B12" });
  },
  {
    name: "lookup_flight",
    description: "Look up the status of a flight.",
    schema: z.object({ query: z.string(), limit: z.number().int().optional() }),
  },
);

const llm = new ChatOpenAI({
  model: env.CAMPROXY_MODEL || "gpt-4o",
  apiKey: env.OPENAI_API_KEY || "sk-langgraph-client",
  maxRetries: 0,
  configuration: { baseURL: env.CAMPROXY_BASE_URL, fetch: capturingFetch },
});

const agent = createReactAgent({
  llm,
  tools: [lookupFlight],
  prompt: "You are an airline agent. Use lookup_flight before answering.",
  checkpointer: new MemorySaver(),
});

const config = { configurable: { thread_id: "thread-1" } };
const answers = [];
for (const text of [env.CAMPROXY_TASK || "Is flight UA12 on time?", env.CAMPROXY_FOLLOWUP || "Check it once more and tell me the gate."]) {
  const out = await agent.invoke({ messages: [{ role: "user", content: text }] }, config);
  const last = out.messages[out.messages.length - 1];
  answers.push(typeof last.content === "string" ? last.content : JSON.stringify(last.content));
}

console.log(JSON.stringify({ answers, toolCalls, calls, sent: calls.map((c) => c.body) }));
