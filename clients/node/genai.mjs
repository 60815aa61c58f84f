// Drives a Gemini API endpoint (camproxy, or internal/testkit's fake) with Google's
// `@google/genai` SDK, set up as its docs say: a function call (generateContent, not
// streamed), then the function response with a streamed answer (generateContentStream:
// ?alt=sse). Prints what it saw as one JSON object for a Go test to check: the calls
// as sent (url, credentials, body) with the X-CAM-* headers of their answers, the
// function calls and the streamed text.
//
// Gemini API (default): GOOGLE_GEMINI_BASE_URL (the root: the SDK appends
// /v1beta/models/…) and GEMINI_API_KEY (default gemini-node-client).
// Vertex AI (CAMPROXY_VERTEX=1): { vertexai, project, location,
// httpOptions: { baseUrl } } with CAMPROXY_BASE_URL as the base, and an OAuth access
// token (CAMPROXY_VERTEX_TOKEN) given as google-auth-library's docs give one, an
// OAuth2Client with credentials in googleAuthOptions.authClient: the SDK sends it as
// Authorization: Bearer on /v1beta1/projects/{p}/locations/{l}/publishers/google/
// models/{m}:…, and no Application Default Credentials (nor the network) are looked up.
//
// Both: CAMPROXY_TASK, CAMPROXY_MODEL (default gemini-2.5-flash). CAMPROXY_GENAI_RUN=stream
// makes one streamed call for the task instead (no tools), reporting the chunks read
// and the error raised (the fault matrix, app/faults_test.go).
import { GoogleGenAI } from "@google/genai";
import { OAuth2Client } from "google-auth-library";

// The SDK notes which credential won with console.debug, on stdout: that is the
// JSON's, so its notes go to stderr.
console.debug = (...args) => console.error(...args);

const sent = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  const h = new Headers(init?.headers);
  const call = { url: String(url), body: typeof init?.body === "string" ? init.body : "",
    authorization: h.get("authorization"), apiKey: h.get("x-goog-api-key") };
  sent.push(call);
  const res = await realFetch(url, init);
  call.context = res.headers.get("x-cam-context");
  call.episode = res.headers.get("x-cam-episode-id");
  return res;
};

function vertexClient() {
  const authClient = new OAuth2Client();
  authClient.setCredentials({ access_token: process.env.CAMPROXY_VERTEX_TOKEN });
  return new GoogleGenAI({
    vertexai: true,
    project: process.env.CAMPROXY_VERTEX_PROJECT || "camproxy-test",
    location: process.env.CAMPROXY_VERTEX_LOCATION || "us-central1",
    httpOptions: { baseUrl: process.env.CAMPROXY_BASE_URL },
    googleAuthOptions: { authClient },
  });
}

const ai = process.env.CAMPROXY_VERTEX === "1"
  ? vertexClient()
  : new GoogleGenAI({ apiKey: process.env.GEMINI_API_KEY || "gemini-node-client" });

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
if (process.env.CAMPROXY_GENAI_RUN === "stream") {
  // One streamed call for the task, no tools: how many chunks the client read, their
  // text, and the error it raised (ApiError: its status and message), if any.
  out.chunks = 0;
  try {
    const stream = await ai.models.generateContentStream({ model, contents });
    for await (const chunk of stream) {
      out.chunks++;
      out.text += chunk.text || "";
    }
  } catch (err) {
    out.error = String(err?.message || err);
    out.errorName = err?.name;
    out.errorStatus = err?.status;
  }
} else {
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
}
console.log(JSON.stringify(out));
