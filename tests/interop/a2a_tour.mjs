// `birddog a2a` as the JavaScript A2A SDK (@a2a-js/sdk 1.3, pinned by package-lock.json)
// sees it: the card with and without the trailing slash, a blocking and a non-blocking
// send, CancelTask on a running task, and a push received and verified with the
// standardwebhooks library. One JSON argument (the config); one JSON object out (what each
// step came to). Run by test_a2a_clients.py.
import http from "node:http";

import { Role, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from "@a2a-js/sdk/client";
import { Webhook } from "standardwebhooks";

const config = JSON.parse(process.argv[2]);
const steps = {};

// Every request carries the caller's token (the card needs none; it does no harm).
const authed = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${config.token}`);
  return fetch(url, { ...init, headers });
};

function factory(binding) {
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [
        new JsonRpcTransportFactory({ fetchImpl: authed }),
        new RestTransportFactory({ fetchImpl: authed }),
      ],
      preferredTransports: [binding],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl: fetch }),
    }),
  );
}

// The command agents serve one session each: the context is that session.
function message(text, contextId = config.context) {
  return {
    messageId: `m-${Math.random().toString(16).slice(2)}`,
    contextId,
    taskId: "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text } }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

function textOf(parts) {
  return (parts ?? [])
    .filter((part) => part.content?.$case === "text")
    .map((part) => part.content.value)
    .join("");
}

function shown(task) {
  return {
    id: task.id,
    state: TaskState[task.status?.state] ?? String(task.status?.state),
    said: textOf(task.status?.message?.parts),
    artifact: textOf(task.artifacts?.[0]?.parts),
  };
}

async function until(what, probe, ok, withinMs = 30000) {
  const deadline = Date.now() + withinMs;
  let last;
  while (Date.now() < deadline) {
    last = await probe();
    if (ok(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${what}: not within ${withinMs} ms; last seen ${JSON.stringify(last)}`);
}

async function thrown(fn) {
  try {
    return { value: await fn() };
  } catch (error) {
    return { thrown: String(error?.message ?? error) };
  }
}

const base = config.url; // http://127.0.0.1:PORT
const upper = `${base}/a2a/${config.agent}/`;

// ---- the card ---------------------------------------------------------------------
const client = await factory("JSONRPC").createFromUrl(upper);
const card = await client.getAgentCard();
steps.card = {
  name: card.name,
  interfaces: card.supportedInterfaces.map((i) => [i.protocolBinding, i.protocolVersion, i.url]),
};
const noSlash = await thrown(() => factory("JSONRPC").createFromUrl(upper.slice(0, -1)));
const beside = await fetch(`${base}/a2a/.well-known/agent-card.json`);
const bare = await fetch(upper.slice(0, -1), { method: "POST", body: "{}" });
steps.card_without_slash = {
  thrown: noSlash.thrown ?? null,
  cardStatus: beside.status,
  cardError: (await beside.json()).error,
  baseStatus: bare.status,
  baseError: (await bare.json()).error,
};

// ---- sends ------------------------------------------------------------------------
for (const binding of ["JSONRPC", "HTTP+JSON"]) {
  const c = await factory(binding).createFromUrl(upper);
  const answered = await c.sendMessage({ message: message(`blocking over ${binding}`) });
  steps[`blocking_${binding}`] = shown(answered);
}
const submitted = await client.sendMessage({
  message: message("not blocking"),
  configuration: { acceptedOutputModes: [], returnImmediately: true },
});
const done = await until(
  "the non-blocking task completes",
  () => client.getTask({ id: submitted.id }),
  (task) => task.status?.state === TaskState.TASK_STATE_COMPLETED,
);
steps.non_blocking = { first: shown(submitted), last: shown(done) };

// ---- cancel -----------------------------------------------------------------------
const slow = await factory("JSONRPC").createFromUrl(`${base}/a2a/${config.slowAgent}/`);
const running = await slow.sendMessage({
  message: message("take your time", config.slowContext),
  configuration: { acceptedOutputModes: [], returnImmediately: true },
});
await until(
  "the slow task runs",
  () => slow.getTask({ id: running.id }),
  (task) => task.status?.state === TaskState.TASK_STATE_WORKING,
);
const asked = performance.now();
const cancelled = await slow.cancelTask({ id: running.id });
steps.cancel = { ...shown(cancelled), tookMs: performance.now() - asked };

// ---- a push, verified -------------------------------------------------------------
const posts = [];
const receiver = http.createServer((request, response) => {
  const chunks = [];
  request.on("data", (chunk) => chunks.push(chunk));
  request.on("end", () => {
    posts.push({ headers: request.headers, body: Buffer.concat(chunks).toString("utf8") });
    response.writeHead(200).end();
  });
});
await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const pushUrl = `http://127.0.0.1:${receiver.address().port}/push`;
const pushed = await client.sendMessage({
  message: message("push me"),
  configuration: {
    acceptedOutputModes: [],
    returnImmediately: true,
    taskPushNotificationConfig: {
      tenant: "",
      id: "p-1",
      taskId: "",
      url: pushUrl,
      token: config.signingSecret,
      authentication: undefined,
    },
  },
});
await until("the push arrives", async () => posts.length, (n) => n > 0);
receiver.close();
const [post] = posts;
let verified;
try {
  verified = new Webhook(config.signingSecret).verify(post.body, post.headers);
} catch (error) {
  verified = { error: String(error?.message ?? error) };
}
steps.push = {
  taskId: pushed.id,
  contentType: post.headers["content-type"],
  webhookId: post.headers["webhook-id"],
  tokenHeader: post.headers["x-a2a-notification-token"] ?? null,
  verified,
};

process.stdout.write(JSON.stringify({ steps }));
