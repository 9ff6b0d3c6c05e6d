/**
 * A Pi turn on the ledger beside Pi's own file session manager, in one run (Node 22.19+, as Pi
 * 1.x needs). A turn is `session.prompt` of Pi's own agent session on its fake model provider:
 * the model asks for one tool (a search answering ~300 bytes), then answers (~300 bytes). The
 * sides take turns a block at a time, so the machine's drift falls on both alike. Prints one
 * JSON object (turns a second at turns 1-20 and at the last 20, the session's bytes) for
 * scripts/bench_adapters.py, which prints the ratios.
 *
 *   node --import tsx bench/pi.ts redis://127.0.0.1:PORT/0 [turns] [block]
 */

import { mkdtempSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { type AgentSession, SessionManager } from "@earendil-works/pi-coding-agent";
import { fauxAssistantMessage, type FauxResponseStep, fauxToolCall } from "@earendil-works/pi-ai";
import { Redis } from "ioredis";

import { PiLedger } from "../src/adapters/pi.js";
import { connect } from "../src/index.js";
import { scripted, tool } from "../test/support/pi.js";

const [url = "redis://127.0.0.1:6379/0", turnsArg = "200", blockArg = "10"] = process.argv.slice(2);
const TURNS = Number(turnsArg);
const BLOCK = Number(blockArg);
const TEXT = "the auth service rotates its signing keys every thirty days; ".repeat(5).slice(0, 300);

/** The model's part of every turn: a search, then the answer; as many as the turns ask. */
function script(turns: number): FauxResponseStep[] {
  const steps: FauxResponseStep[] = [];
  for (let n = 0; n < turns; n++) {
    steps.push(fauxAssistantMessage([fauxToolCall("search", { q: `key rotation ${n}` }, { id: `call-${n}` })], { stopReason: "toolUse" }));
    steps.push(fauxAssistantMessage(TEXT));
  }
  return steps;
}

interface Side {
  name: string;
  session: AgentSession;
  after: () => Promise<void>; // what a turn must wait for to be kept (the ledger's flush)
  size: () => Promise<number>;
  times: number[]; // ms per turn, in order
}

async function side(name: string, manager: SessionManager, size: () => Promise<number>, ledger?: PiLedger): Promise<Side> {
  const run = await scripted(manager, script(TURNS), (calls) => [tool("search", calls, () => TEXT)], ledger?.extension);
  return { name, session: run.session, after: async () => ledger?.flush(), size, times: [] };
}

async function block(s: Side, from: number): Promise<void> {
  for (let n = from; n < Math.min(from + BLOCK, TURNS); n++) {
    const start = performance.now();
    await s.session.prompt(`${TEXT.slice(0, 240)} (turn ${n})`);
    await s.after();
    s.times.push(performance.now() - start);
  }
}

const rate = (times: number[]): number => (1000 * times.length) / times.reduce((a, b) => a + b, 0);

const dir = mkdtempSync(join(tmpdir(), "bench-pi-"));
const own = SessionManager.create(dir, join(dir, "sessions"));
const store = connect(url, { prefix: "pi-bench" });
const ledger = await PiLedger.open(store, { session: "bench", cwd: dir });
const redis = new Redis(url);
const sides = [
  await side("Pi's file session manager", own, async () => {
    const files = readdirSync(join(dir, "sessions"));
    return files.reduce((total, file) => total + statSync(join(dir, "sessions", file)).size, 0);
  }),
  await side("PiLedger on Redis", ledger.sessionManager, async () => {
    let bytes = 0;
    for (const key of await redis.keys("pi-bench:{bench}:*")) bytes += (await redis.memory("USAGE", key)) ?? 0;
    return bytes;
  }, ledger),
];
for (let from = 0; from < TURNS; from += BLOCK) for (const s of sides) await block(s, from);
const out: Record<string, unknown> = {};
for (const s of sides) {
  out[s.name] = { first: rate(s.times.slice(0, 20)), last: rate(s.times.slice(-20)), bytes: await s.size() };
}
await ledger.close();
await store.close();
redis.disconnect();
console.log(JSON.stringify(out));
