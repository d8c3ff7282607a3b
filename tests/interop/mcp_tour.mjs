// `birddog mcp` driven by the TypeScript MCP SDK's own Client, as hosts built on it do.
//
// Two agents, alice and bob, each with a Client: over stdio (each starts its own
// `birddog mcp --as ...`) or over streamable HTTP (one server, each agent's bearer token
// in requestInit.headers). Every client lists the tools first, as every host does, so the
// SDK validates each result's structured content against the tool's output schema.
// Then: every tool's success, every kind of bad input, progress, a cancelled ask, and a
// task taken and answered. What the model would see is read from the text block alone.
// A third agent, "poster" (one whose route posts to an inbox URL), asks and sends.
//
// Usage: node mcp_tour.mjs '<config JSON>'
//   {"transport": "stdio", "alice": {"command", "args", "env", "cwd"}, "bob": {...},
//    "poster": {...}, "maxContentBytes": 4096}
//   {"transport": "http", "url": "http://127.0.0.1:PORT/mcp",
//    "alice": {"token": "..."}, "bob": {"token": "..."}, "poster": {"token": "..."},
//    "maxContentBytes": 4096}
// Prints one JSON object: {"steps": {label: observation}}; the pytest test asserts on it.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const config = JSON.parse(process.argv[2]);
const steps = {};

function transportFor(who) {
  const side = config[who];
  if (config.transport === "stdio") {
    return new StdioClientTransport({
      command: side.command,
      args: side.args,
      env: side.env,
      cwd: side.cwd,
      stderr: "inherit",
    });
  }
  return new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers: { Authorization: `Bearer ${side.token}` } },
  });
}

async function connect(who) {
  const client = new Client({ name: `birddog-interop-${who}`, version: "1.0.0" });
  await client.connect(transportFor(who));
  return client;
}

// The JSON a text block carries after its first line and a blank line (null if none).
function factsOf(text) {
  const at = text.indexOf("\n\n");
  return at < 0 ? null : JSON.parse(text.slice(at + 2));
}

// One call as a host sees it: the text block, the error flag, the structured content,
// or the protocol error the SDK threw.
async function call(client, name, args, options) {
  try {
    const result = await client.callTool({ name, arguments: args }, undefined, options);
    const texts = result.content.filter((block) => block.type === "text");
    return {
      isError: Boolean(result.isError),
      text: texts.map((block) => block.text).join("\n"),
      blocks: result.content.length,
      structured: result.structuredContent ?? null,
    };
  } catch (error) {
    return { thrown: { code: error.code ?? null, message: String(error.message ?? error) } };
  }
}

async function until(what, probe, withinMs = 60_000) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const seen = await probe();
    if (seen) return seen;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// Polls inbox until a reply to mail `key` is listed; the reply as read from the text alone.
async function replyTo(client, key) {
  return until(`the reply to ${key}`, async () => {
    const listed = await call(client, "inbox", { unread_only: false, limit: 100 });
    const facts = listed.text ? factsOf(listed.text) : null;
    const reply = facts?.replies?.find((entry) => entry.in_reply_to === key);
    return reply ? { listed, reply } : null;
  });
}

const alice = await connect("alice");
const bob = await connect("bob");
const poster = await connect("poster");
try {
  const { tools } = await alice.listTools();
  await bob.listTools();
  steps.listed = tools.map((tool) => ({
    name: tool.name,
    title: tool.title ?? null,
    annotations: tool.annotations ?? null,
    undescribed: Object.entries(tool.inputSchema.properties ?? {})
      .filter(([, schema]) => !schema.description)
      .map(([name]) => name),
    outputSchema: Boolean(tool.outputSchema),
  }));

  // Mail, and the mailbox: the reply read from inbox's text, then read whole, then acked.
  steps.send = await call(alice, "send", { to: "upper:s-upper", content: "hello from node" });
  const sentKey = factsOf(steps.send.text).key;
  const { listed, reply } = await replyTo(alice, sentKey);
  steps.inbox = { ...listed, replyKey: reply.key, replyContent: reply.content };
  steps.read = await call(alice, "read", { key: reply.key });
  steps.ack = await call(alice, "ack", { keys: [reply.key] });
  steps.status = await call(alice, "status", { key: sentKey });
  steps.agents = await call(alice, "agents", {});

  // Asks: answered, failed, pending then waited for.
  steps.ask = await call(alice, "ask", { to: "upper:s-upper", content: "what is due?" });
  steps.ask_failed = await call(alice, "ask", { to: "fail:s-fail", content: "go" });
  steps.ask_pending = await call(alice, "ask", {
    to: "slow:s-slow",
    content: "take your time",
    wait_s: 1,
  });
  steps.wait = await call(alice, "wait", { key: factsOf(steps.ask_pending.text).key, wait_s: 60 });

  // Progress while waiting: the first at 0 s names the key.
  const progressed = [];
  steps.ask_progress = await call(
    alice,
    "ask",
    { to: "slow:s-slow", content: "progress", wait_s: 60 },
    { onprogress: (p) => progressed.push(p), timeout: 120_000 },
  );
  steps.ask_progress.progress = progressed;

  // A call the client gives up on: the progress named its key; the reply lands there.
  const heard = [];
  steps.ask_cancelled = await call(
    alice,
    "ask",
    { to: "slow:s-slow", content: "cancel me", wait_s: 60 },
    { onprogress: (p) => heard.push(p), timeout: 1500 },
  );
  steps.ask_cancelled.progress = heard;
  const named = /as key (\S+):/.exec(heard[0]?.message ?? "");
  if (named) {
    const landed = await replyTo(alice, named[1]);
    steps.ask_cancelled.landed = landed.reply;
  }

  // A task: alice asks bob; bob takes it, answers it, and a second answer is refused.
  const asking = call(alice, "ask", { to: "bob:s-bob", content: "lunch?", wait_s: 60 });
  steps.next_task = await call(bob, "next_task", { wait_s: 30 });
  const jobId = factsOf(steps.next_task.text).job_id;
  steps.next_task_again = await call(bob, "next_task", {});
  steps.answer = await call(bob, "answer", { job_id: jobId, content: "yes, at noon" });
  steps.asked_bob = await asking;
  steps.answer_again = await call(bob, "answer", { job_id: jobId, content: "yes" });

  // Bad input: each a tool error whose text gives the reason.
  const big = "x".repeat(config.maxContentBytes + 1);
  const bad = {
    unknown_argument: ["ask", { to: "upper:s-upper", content: "x", colour: "red" }],
    bad_address: ["ask", { to: "no-colon", content: "x" }],
    unknown_agent: ["ask", { to: "nobody:s-x", content: "x" }],
    wait_too_long: ["ask", { to: "upper:s-upper", content: "x", wait_s: 500 }],
    content_too_large: ["send", { to: "upper:s-upper", content: big }],
    nul_in_content: ["send", { to: "upper:s-upper", content: "nul \u0000 inside" }],
    bad_reply_to: ["send", { to: "upper:s-upper", content: "x", reply_to: ["bad"] }],
    missing_content: ["send", { to: "upper:s-upper" }],
    wait_unknown_key: ["wait", { key: "never-sent" }],
    read_unknown_key: ["read", { key: "outbox:never:reply:0" }],
    ack_unknown_key: ["ack", { keys: ["outbox:never:reply:0"] }],
    ack_not_a_list: ["ack", { keys: "not-a-list" }],
    inbox_limit_zero: ["inbox", { limit: 0 }],
    answer_not_taken: ["answer", { job_id: "not-mine", content: "x" }],
    answer_bad_outcome: ["answer", { job_id: "not-mine", content: "x", outcome: "maybe" }],
    status_unknown_key: ["status", { key: "never-sent" }],
  };
  steps.errors = {};
  for (const [label, [tool, args]] of Object.entries(bad)) {
    steps.errors[label] = await call(alice, tool, args);
  }
  steps.unknown_tool = await call(alice, "nonesuch", {});
  steps.after_errors = await call(alice, "agents", {});

  // An agent whose route posts to an inbox URL asks like any other: the answer comes (its
  // reply lands in its mailbox); the reply to its send goes to its URL (the test reads it).
  await poster.listTools();
  steps.poster_ask = await call(poster, "ask", {
    to: "upper:s-upper",
    content: "asked from an inbox route",
  });
  steps.poster_send = await call(poster, "send", {
    to: "upper:s-upper",
    content: "sent from an inbox route",
  });
} finally {
  await alice.close();
  await bob.close();
  await poster.close();
}
process.stdout.write(JSON.stringify({ steps }) + "\n");
