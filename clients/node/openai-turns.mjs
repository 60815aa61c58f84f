// What the `openai` npm scripts (openai-chat.mjs with OpenAI, azure-openai.mjs with
// AzureOpenAI) share, so both clients run the same conversation: a fetch that
// captures each call, and the chat turns — a tool call (not streamed), then the tool
// result with a streamed answer that asks for the usage chunk
// (stream_options.include_usage) — reported as the Go tests read them.

// Reads of event-stream answers still going on (capturingFetch), awaited by report.
const reads = [];

// capturingFetch is a fetch that pushes each call onto sent: its url, body and
// credentials (Authorization, api-key) as the client sent them, the X-CAM-*
// headers of its answer and, for an event stream, the answer's text as it came
// (read from a clone, as the client reads the answer).
export function capturingFetch(sent) {
  return async (url, init) => {
    const h = new Headers(init.headers);
    const call = {
      url: String(url),
      body: typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body),
      authorization: h.get("authorization"),
      apiKey: h.get("api-key"),
    };
    sent.push(call);
    const res = await fetch(url, init);
    call.context = res.headers.get("x-cam-context");
    call.episode = res.headers.get("x-cam-episode-id");
    if ((res.headers.get("content-type") || "").startsWith("text/event-stream")) {
      reads.push(res.clone().text().then((text) => { call.stream = text; }));
    }
    return res;
  };
}

// report prints sent and out as one JSON object, once the answers are read whole.
export async function report(sent, out) {
  await Promise.all(reads);
  console.log(JSON.stringify({ sent, ...out }));
}

// chatTurns runs the two chat turns on client for task; firstExtra is added to the
// first call's body.
export async function chatTurns(client, task, firstExtra = {}) {
  const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }];
  const messages = [
    { role: "system", content: "You are an airline agent." },
    { role: "user", content: task },
  ];
  const first = await client.chat.completions.create({ model: "gpt-4o", messages, tools, ...firstExtra }).withResponse();
  const msg = first.data.choices[0].message;

  messages.push(msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: '{"status":"on time"}' });
  const stream = await client.chat.completions
    .create({ model: "gpt-4o", messages, tools, stream: true, stream_options: { include_usage: true } })
    .withResponse();
  let content = "";
  let chunks = 0;
  let usage = null;
  let usageChunk = null; // where the include_usage chunk came: {index, choices}
  for await (const chunk of stream.data) {
    chunks++;
    if (chunk.choices[0]?.delta?.content) content += chunk.choices[0].delta.content;
    if (chunk.usage) {
      usage = chunk.usage;
      usageChunk = { index: chunks - 1, choices: chunk.choices.length };
    }
  }
  return {
    toolCall: msg.tool_calls[0],
    headers: [first.response.headers.get("x-cam-context"), stream.response.headers.get("x-cam-context")],
    episodes: [first.response.headers.get("x-cam-episode-id"), stream.response.headers.get("x-cam-episode-id")],
    content,
    chunks,
    usage,
    usageChunk,
    firstUsage: first.data.usage,
  };
}
