// The official openai-node SDK against an Edge: each endpoint once, the results as one JSON line.
// Usage: node openai_node_client.mjs <node_modules dir>; IOP_BASE_URL and IOP_API_KEY in the env.
import { createRequire } from "node:module";

const require = createRequire(`${process.argv[2]}/`);
const { default: OpenAI } = require("openai");

const client = new OpenAI({
  baseURL: process.env.IOP_BASE_URL,
  apiKey: process.env.IOP_API_KEY,
  maxRetries: 0,
});

async function collect(stream, pick) {
  let text = "";
  for await (const event of stream) text += pick(event) ?? "";
  return text;
}

const results = {};
results.model = (await client.models.retrieve("echo")).id;
try {
  await client.models.retrieve("no-such-model");
} catch (error) {
  results.unknown_model = { status: error.status, code: error.code };
}
const chat = await client.chat.completions.create({
  model: "echo",
  messages: [{ role: "user", content: "hello from node" }],
});
results.chat = chat.choices[0].message.content;
results.chat_stream = await collect(
  await client.chat.completions.create({
    model: "echo",
    messages: [{ role: "user", content: "hello from node" }],
    stream: true,
  }),
  (chunk) => chunk.choices[0]?.delta?.content,
);
const embedding = await client.embeddings.create({ model: "echo", input: "alpha" });
results.embedding = embedding.data[0].embedding;
const completion = await client.completions.create({ model: "echo", prompt: "say this" });
results.completion = completion.choices[0].text;
const response = await client.responses.create({ model: "echo", input: "hi there" });
results.response = response.output_text;
results.response_stream = await collect(
  await client.responses.create({ model: "echo", input: "hi there", stream: true }),
  (event) => (event.type === "response.output_text.delta" ? event.delta : ""),
);
console.log(JSON.stringify(results));
