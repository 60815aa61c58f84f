// A real Strands agent (@strands-agents/sdk) with one tool, lookup_flight, doing a
// two-request task through camproxy (or internal/testkit's fakes): each request makes
// the model call the tool and then answer, and the second resends the whole history.
// Prints the answers and the number of model and tool calls as one JSON object.
//
// Env: CAMPROXY_MODEL_KIND=bedrock|openai (default bedrock), CAMPROXY_BASE_URL
//   bedrock: the Bedrock Runtime endpoint (e.g. http://127.0.0.1:8080); AWS_ACCESS_KEY_ID,
//            AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN optional), AWS_REGION (default
//            us-east-1), CAMPROXY_MODEL_ID (default us.anthropic.claude-3-5-sonnet-20241022-v2:0),
//            CAMPROXY_STREAM=0 for Converse instead of ConverseStream, CAMPROXY_AWS_HTTP1=1 for
//            HTTP/1.1 instead of the AWS SDK's HTTP/2 (h2c on http://)
//   openai:  the OpenAI base URL including /v1; OPENAI_API_KEY (default sk-strands-client),
//            CAMPROXY_MODEL_ID (default gpt-4o)
// CAMPROXY_TASK (the first request), CAMPROXY_FOLLOWUP (the second; "" = none).
import { Agent, BedrockModel, FunctionTool, BeforeModelCallEvent, AfterToolCallEvent } from "@strands-agents/sdk";
import { NodeHttpHandler } from "@smithy/node-http-handler";

const env = process.env;
const kind = env.CAMPROXY_MODEL_KIND || "bedrock";

let model;
if (kind === "bedrock") {
  model = new BedrockModel({
    modelId: env.CAMPROXY_MODEL_ID || "us.anthropic.claude-3-5-sonnet-20241022-v2:0",
    region: env.AWS_REGION || "us-east-1",
    maxTokens: 512,
    stream: env.CAMPROXY_STREAM !== "0",
    clientConfig: {
      endpoint: env.CAMPROXY_BASE_URL,
      maxAttempts: 1,
      ...(env.CAMPROXY_AWS_HTTP1 === "1" ? { requestHandler: new NodeHttpHandler() } : {}),
      credentials: {
        accessKeyId: env.AWS_ACCESS_KEY_ID,
        secretAccessKey: env.AWS_SECRET_ACCESS_KEY,
        ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}),
      },
    },
  });
} else if (kind === "openai") {
  const { OpenAIModel } = await import("@strands-agents/sdk/models/openai");
  model = new OpenAIModel({
    api: "chat",
    modelId: env.CAMPROXY_MODEL_ID || "gpt-4o",
    apiKey: env.OPENAI_API_KEY || "sk-strands-client",
    clientConfig: { baseURL: env.CAMPROXY_BASE_URL, maxRetries: 0 },
  });
} else {
  throw new Error(`CAMPROXY_MODEL_KIND=${kind}: want bedrock or openai`);
}

const toolInputs = [];
const lookupFlight = new FunctionTool({
  name: "lookup_flight",
  description: "Look up the status of a flight.",
  inputSchema: {
    type: "object",
    properties: { query: { type: "string" }, limit: { type: "integer" }, flight: { type: "string" } },
  },
  callback: (input) => {
    toolInputs.push(input);
    return { flight: "UA12", status: "on time", departure: "2024-05-01T09:30:00-04:00", gate: "B12" };
  },
});

const agent = new Agent({
  model,
  tools: [lookupFlight],
  systemPrompt: "You are an airline agent. Use lookup_flight before answering.",
  printer: false,
});
let modelCalls = 0;
let toolCalls = 0;
const toolErrors = [];
agent.addHook(BeforeModelCallEvent, () => {
  modelCalls++;
});
agent.addHook(AfterToolCallEvent, (ev) => {
  toolCalls++;
  if (ev.error || ev.result?.status === "error") toolErrors.push(String(ev.error ?? JSON.stringify(ev.result)));
});

const textOf = (result) =>
  result.lastMessage.content
    .filter((b) => b.type === "textBlock" || typeof b.text === "string")
    .map((b) => b.text)
    .join("");

const prompts = [env.CAMPROXY_TASK || "Is flight UA12 on time?"];
if (env.CAMPROXY_FOLLOWUP !== "") prompts.push(env.CAMPROXY_FOLLOWUP || "Check it once more and tell me the gate.");
const answers = [];
const stopReasons = [];
for (const p of prompts) {
  const result = await agent.invoke(p);
  answers.push(textOf(result));
  stopReasons.push(result.stopReason);
}

console.log(JSON.stringify({
  kind,
  final: answers[answers.length - 1],
  answers,
  stopReasons,
  modelCalls,
  toolCalls,
  toolInputs,
  toolErrors,
  messages: agent.messages.length,
}));
