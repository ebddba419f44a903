// Runs the official OpenAI SDK for Node.js against the base URL in
// RINGLB_URL: one conversation of TURNS turns (streamed and plain in
// turn), then a plain completion. Prints one JSON line per request:
// what the SDK returned and which server answered (X-Server) through
// which upstream (X-Upstream, ringlb's upstream_header).
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.RINGLB_URL + "/v1", apiKey: "not-checked", maxRetries: 0 });
const turns = Number(process.env.TURNS || 4);
const messages = [{ role: "system", content: "You answer questions about the quarterly report." }];

for (let turn = 0; turn < turns; turn++) {
  messages.push({ role: "user", content: `Question ${turn}: what changed in section ${turn + 1}?` });
  const stream = turn % 2 === 0;
  let content = "";
  let chunks = 0;
  let response;
  if (stream) {
    const { data, response: r } = await client.chat.completions
      .create({ model: "sim-8b", messages, max_tokens: 12, stream: true })
      .withResponse();
    response = r;
    for await (const chunk of data) {
      chunks++;
      content += chunk.choices[0]?.delta?.content ?? "";
    }
  } else {
    const { data, response: r } = await client.chat.completions
      .create({ model: "sim-8b", messages, max_tokens: 12 })
      .withResponse();
    response = r;
    content = data.choices[0].message.content;
  }
  messages.push({ role: "assistant", content });
  console.log(JSON.stringify({
    kind: "chat", turn, stream, chunks, content,
    server: response.headers.get("x-server"), upstream: response.headers.get("x-upstream"),
  }));
}

const { data, response } = await client.completions
  .create({ model: "sim-8b", prompt: "Once upon a time", max_tokens: 5 })
  .withResponse();
console.log(JSON.stringify({
  kind: "completion", content: data.choices[0].text,
  server: response.headers.get("x-server"), upstream: response.headers.get("x-upstream"),
}));
