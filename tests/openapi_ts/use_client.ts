// A user's script against a live node, through a client generated from its OpenAPI
// document (openapi-typescript's types under openapi-fetch), compiled with `tsc --strict`
// before it runs: it submits a three-word command, follows its log as text, reads the
// task's events, and gets the typed errors of a 404 and a 422. tests/openapi_typescript.rs
// runs it; any failed check exits non-zero, naming the check.
import createClient from "openapi-fetch";
import type { components, paths } from "./gen/openapi-typescript/schema.js";

type Task = components["schemas"]["Task"];
type ErrorBody = components["schemas"]["ErrorBody"];

const base = required("BATON_URL");
const token = required("BATON_TOKEN");
const auth = { Authorization: `Bearer ${token}` };
const client = createClient<paths>({ baseUrl: base, headers: auth });

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

function check(ok: boolean, what: string): asserts ok {
  if (!ok) {
    console.error(`failed: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

// The task's events, from the stream opened before the submit: every status it takes.
async function statusesOf(events: Response, task: string, until: string): Promise<string[]> {
  const reader = events.body!.pipeThrough(new TextDecoderStream()).getReader();
  const seen: string[] = [];
  let buffered = "";
  while (!seen.includes(until)) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
    const frames = buffered.split("\n\n");
    buffered = frames.pop() ?? "";
    for (const frame of frames) {
      const data = frame.split("\n").find((line) => line.startsWith("data: "));
      if (!data) continue;
      const event = JSON.parse(data.slice("data: ".length)) as { task_id?: string; status?: string };
      if (event.task_id === task && event.status) seen.push(event.status);
    }
  }
  await reader.cancel();
  return seen;
}

const events = await fetch(`${base}/v1/events?kind=task`, { headers: auth });
check(events.ok, `the event stream opens: ${events.status}`);

// A command of three words: the schema says an array of strings, not a one-element tuple.
const submitted = await client.POST("/v1/tasks", {
  body: { command: ["sh", "-c", "echo hello from typescript; echo bye"] },
});
check(submitted.response.status === 201, `submit answers 201: ${submitted.response.status}`);
const task: Task = submitted.data!;

const followed = await client.GET("/v1/tasks/{id}/logs", {
  params: { path: { id: task.id }, query: { follow: true } },
  parseAs: "text",
});
check(followed.response.status === 200, `the log answers 200: ${followed.response.status}`);
const log: string = followed.data!;
check(log.includes("hello from typescript") && log.includes("bye"), `the followed log, as text: ${JSON.stringify(log)}`);

const statuses = await statusesOf(events, task.id, "succeeded");
check(statuses.includes("running") && statuses.at(-1) === "succeeded", `its events: ${statuses.join(", ")}`);

const missing = await client.GET("/v1/tasks/{id}", {
  params: { path: { id: "00000000-0000-4000-8000-000000000000" } },
});
const notFound: ErrorBody | undefined = missing.error;
check(missing.response.status === 404 && notFound?.error.code === "not_found", `a typed 404: ${JSON.stringify(notFound)}`);

const invalid = await client.POST("/v1/tasks", { body: { command: ["sh"], priority: 1_000_000 } });
const refused: ErrorBody | undefined = invalid.error;
check(invalid.response.status === 422 && typeof refused?.error.message === "string", `a typed 422: ${JSON.stringify(refused)}`);
