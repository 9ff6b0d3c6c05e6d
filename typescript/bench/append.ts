/**
 * The TypeScript SDK's appends against raw ioredis, on one server, in one run: a single-event
 * append beside one XADD round trip, a 100-event append beside 100 pipelined XADDs. Prints one
 * JSON object of rates (per second) for scripts/bench_languages.py, which runs the Python and Go
 * sides in the same run and prints the ratios.
 *
 *   node --import tsx bench/append.ts redis://127.0.0.1:PORT/0 [seconds per measure]
 */

import { encode } from "@msgpack/msgpack";
import { Redis } from "ioredis";

import { connect, streamId } from "../src/index.js";

const [url = "redis://127.0.0.1:6379/0", seconds = "2"] = process.argv.slice(2);
const budgetMs = Number(seconds) * 1000;

const ARGS = {
  query: "jwt rotation policy for the auth service",
  path: "/srv/app/auth/tokens.py",
  limit: 20,
  flags: ["recursive", "follow-symlinks"],
  context: "x".repeat(120),
};
/** The ~300-byte tool_call every comparison uses (scripts/bench.py's). */
const toolCall = (i: number): Record<string, unknown> => ({
  type: "tool_call",
  agent: "backend-dev",
  tool: "code_search",
  args: ARGS,
  attempt_id: `att-${String(i).padStart(8, "0")}`,
  run_id: "run-0001",
  step_id: `step-${String(i).padStart(6, "0")}`,
});
const PAYLOAD = Buffer.from(encode(toolCall(0)));

/** Operations a second of `op(i)`, run back to back for the budget, after a warm-up. */
async function rate(op: (i: number) => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 200; i++) await op(-i - 1);
  let n = 0;
  const start = performance.now();
  while (performance.now() - start < budgetMs) await op(n++);
  return n / ((performance.now() - start) / 1000);
}

const raw = new Redis(url);
const store = connect(url, { prefix: `bench${Date.now()}` });
const single = streamId("bench-ts", "single");
const batch = streamId("bench-ts", "batch");
let version = 0;
let batches = 0;

const out = {
  raw_xadd: await rate(() => raw.xaddBuffer("raw:single", "*", "p", PAYLOAD)),
  append_1: await rate(async (i) => {
    const done = await store.append(single, version, `s${i}`, [toolCall(i)]);
    version = done.lastVersion;
  }),
  raw_xadd_100: await rate(async () => {
    const pipe = raw.pipeline();
    for (let k = 0; k < 100; k++) pipe.xaddBuffer("raw:batch", "*", "p", PAYLOAD);
    await pipe.exec();
  }),
  append_100: await rate(async () => {
    const events = Array.from({ length: 100 }, (_, k) => toolCall(batches * 100 + k));
    await store.append(batch, "any", `b${batches++}`, events);
  }),
};
process.stdout.write(JSON.stringify(out) + "\n");
raw.disconnect();
await store.close();
