// What the Vercel AI SDK scripts (ai-sdk-agent.mjs with @ai-sdk/openai,
// ai-sdk-google.mjs with @ai-sdk/google) share, so both providers run the same agent:
// the lookup_flight tool, the system prompt, the loop settings and how a run's steps
// are reported.
import { tool, stepCountIs } from "ai";
import { z } from "zod";

// agentSettings is generateText's and streamText's settings for model; every tool
// input the model sends is pushed onto toolInputs.
export function agentSettings(model, toolInputs) {
  const tools = {
    lookup_flight: tool({
      description: "Look up the status of a flight.",
      inputSchema: z.object({ query: z.string(), limit: z.number().int().optional() }),
      execute: async (input) => {
        toolInputs.push(input);
        return { flight: "UA12", status: "on time", gate: "B12" };
      },
    }),
  };
  const system = "You are an airline agent. Use lookup_flight before answering.";
  return { model, system, tools, stopWhen: stepCountIs(5), maxRetries: 0 };
}

// stepsOf is what a Go test checks of a run's steps.
export const stepsOf = (steps) => steps.map((s) => ({
  finishReason: s.finishReason,
  toolCalls: s.toolCalls.map((c) => c.toolName),
  usage: { inputTokens: s.usage.inputTokens, outputTokens: s.usage.outputTokens },
}));
