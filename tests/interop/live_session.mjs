// A live agent session on the TypeScript MCP SDK: it waits in next_task and answers
// each task it gets, while a `birddog worker --command` for the same agent runs beside
// it (the pytest test counts that worker's spawns: none while this session is live).
//
// The Client starts its own `birddog mcp --as AGENT:SESSION` over stdio, which announces
// the session live; the test queues the mails once it is. Each task is answered with its
// content reversed, so the test can tell this session's answers from the worker's.
//
// Usage: node live_session.mjs '<config JSON>'
//   {"server": {"command", "args", "env", "cwd"}, "count": 3, "waitS": 30}
// Prints one JSON object: {"tasks": [{job_id, status, content}], "answers": [...]}.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const config = JSON.parse(process.argv[2]);

const client = new Client({ name: "birddog-interop-live", version: "1.0.0" });
await client.connect(
  new StdioClientTransport({ ...config.server, stderr: "inherit" }),
);
// Hosts list the tools first: the SDK then validates each result's structured content.
await client.listTools();

const tasks = [];
const answers = [];
for (let n = 0; n < config.count; n += 1) {
  const found = await client.callTool({
    name: "next_task",
    arguments: { wait_s: config.waitS },
  });
  const task = found.structuredContent ?? {};
  tasks.push({ job_id: task.job_id, status: task.status, content: task.content });
  if (task.status !== "task") {
    break;
  }
  const answered = await client.callTool({
    name: "answer",
    arguments: { job_id: task.job_id, content: [...task.content].reverse().join("") },
  });
  answers.push({ isError: Boolean(answered.isError), structured: answered.structuredContent });
}
await client.close();
process.stdout.write(JSON.stringify({ tasks, answers }) + "\n");
