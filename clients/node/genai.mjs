// Drives a Gemini API endpoint (camproxy, or internal/testkit's fake) with Google's
// `@google/genai` SDK, set up only by GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY as its
// docs say: a function call (generateContent, not streamed), then the function
// response with a streamed answer (generateContentStream: ?alt=sse). Prints what it
// saw as one JSON object for a Go test to check.
//
// Env: GOOGLE_GEMINI_BASE_URL (the root: the SDK appends /v1beta/models/…),
// GEMINI_API_KEY (default gemini-node-client), CAMPROXY_TASK, CAMPROXY_MODEL
// (default gemini-2.5-flash). Vertex AI (a bearer token) is not driven yet.
import { GoogleGenAI } from "@google/genai";

const sent = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  sent.push({ url: String(url), body: typeof init?.body === "string" ? init.body : "" });
  return realFetch(url, init);
};

const ai = new GoogleGenAI({ apiKey: process.env.GEMINI_API_KEY || "gemini-node-client" });

const model = process.env.CAMPROXY_MODEL || "gemini-2.5-flash";
const config = {
  systemInstruction: "You are an airline agent.",
  tools: [{ functionDeclarations: [{
    name: "lookup_flight",
    description: "Look up a flight's status.",
    parametersJsonSchema: { type: "object", properties: { query: { type: "string" }, limit: { type: "integer" } } },
  }] }],
};
const task = process.env.CAMPROXY_TASK || "Is flight UA 100 on time?";
const contents = [{ role: "user", parts: [{ text: task }] }];

const out = { sent, calls: [], text: "" };
try {
  const first = await ai.models.generateContent({ model, contents, config });
  const calls = first.functionCalls || [];
  out.calls = calls.map((c) => ({ id: c.id, name: c.name, args: c.args }));
  contents.push(first.candidates[0].content);
  contents.push({ role: "user", parts: calls.map((c) => ({ functionResponse: { id: c.id, name: c.name, response: { output: "on time" } } })) });
  const stream = await ai.models.generateContentStream({ model, contents, config });
  for await (const chunk of stream) {
    out.text += chunk.text || "";
  }
} catch (err) {
  out.error = String(err?.message || err);
}
console.log(JSON.stringify(out));
