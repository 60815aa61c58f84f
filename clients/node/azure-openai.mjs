// Drives camproxy with the `openai` npm package as Azure's docs configure it for an
// Azure OpenAI resource: the resource endpoint (AZURE_OPENAI_ENDPOINT, read by
// AzureOpenAI itself), an api version, and either an api key or a Microsoft Entra
// token: with CAMPROXY_AZURE_TOKEN set, azureADTokenProvider (a function returning
// the token, as @azure/identity's getBearerTokenProvider does) instead of the key,
// which the client sends as Authorization: Bearer. Prints what it saw as JSON for
// app/azure_test.go.
//
// CAMPROXY_AZURE_API=chat (default): the chat turns of openai-turns.mjs (a tool call,
// then a streamed answer) with deployment "gpt4-deploy":
// /openai/deployments/gpt4-deploy/chat/completions?api-version=2024-10-21.
// CAMPROXY_AZURE_API=responses: one streamed Responses call (stream: true) for
// CAMPROXY_TASK, reporting every event as the client parsed it, on the path
// CAMPROXY_AZURE_PATH names:
//   resource    AzureOpenAI → /openai/responses?api-version=2025-04-01-preview
//   deployment  AzureOpenAI with baseURL {endpoint}/openai/deployments/gpt4-deploy (the
//               client keeps a baseURL that names a deployment) →
//               /openai/deployments/gpt4-deploy/responses?api-version=2025-04-01-preview
//   v1          OpenAI with baseURL {endpoint}/openai/v1/ and the key or token provider
//               as its apiKey, as Azure's v1 API docs set it up → /openai/v1/responses
import OpenAI, { AzureOpenAI } from "openai";
import { capturingFetch, chatTurns, report } from "./openai-turns.mjs";

const sent = [];
const endpoint = process.env.AZURE_OPENAI_ENDPOINT;
const token = process.env.CAMPROXY_AZURE_TOKEN;
const common = { maxRetries: 0, fetch: capturingFetch(sent) };
// The credential, as AzureOpenAI takes it: a token provider or a key.
const auth = token ? { azureADTokenProvider: async () => token } : { apiKey: "az-client-key" };

let out;
if ((process.env.CAMPROXY_AZURE_API || "chat") === "chat") {
  const client = new AzureOpenAI({ ...auth, apiVersion: "2024-10-21", deployment: "gpt4-deploy", ...common });
  out = await chatTurns(client, process.env.CAMPROXY_TASK);
} else {
  const apiVersion = "2025-04-01-preview";
  const client = {
    resource: () => new AzureOpenAI({ ...auth, apiVersion, ...common }),
    deployment: () => new AzureOpenAI({ ...auth, apiVersion, baseURL: `${endpoint}/openai/deployments/gpt4-deploy`, ...common }),
    v1: () => new OpenAI({ apiKey: auth.azureADTokenProvider ?? auth.apiKey, baseURL: `${endpoint}/openai/v1/`, ...common }),
  }[process.env.CAMPROXY_AZURE_PATH]();
  const stream = await client.responses
    .create({ model: "gpt4-deploy", instructions: "You are an airline agent.", input: process.env.CAMPROXY_TASK, stream: true })
    .withResponse();
  const events = [];
  for await (const ev of stream.data) events.push(ev);
  out = {
    events,
    headers: [stream.response.headers.get("x-cam-context")],
    episodes: [stream.response.headers.get("x-cam-episode-id")],
  };
}
await report(sent, out);
