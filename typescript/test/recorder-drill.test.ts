// The recorder's fencing drill: a Node process holding a run with a short lease is stopped
// (SIGSTOP) past it, continued (SIGCONT) with its next write already queued on its stdin, and
// that write is refused (LeaseLost) with nothing of it stored, whether another process took the
// run over and wrote meanwhile or nobody did; the new holder's writes are accepted. 50 rounds
// each, two long-lived processes, a run a round (tests/features/test_fencing.py is Python's).
import { randomBytes } from "node:crypto";

import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { connect, type ConnectedStore, streamId } from "../src/index.js";
import { Keys } from "../src/store/keys.js";
import { NodePeer } from "./support/nodepeer.js";
import { LocalServer } from "./support/servers.js";

const ROUNDS = 50;
// The stopped process's lease: short, so that a round is short, and long enough that a loaded
// machine does not let it lapse before the stop.
const ZOMBIE_TTL_MS = 400;
const HEIR_TTL_MS = 10_000; // the new holder's: it must not lapse while a round looks on

const server = new LocalServer();
const prefix = `d${randomBytes(4).toString("hex")}`;
const keys = new Keys(prefix);
let store: ConnectedStore;
let redis: Redis;
let zombie: NodePeer;
let heir: NodePeer;

beforeAll(async () => {
  await server.start();
  store = connect(server.url, { prefix });
  redis = new Redis(server.url);
  zombie = new NodePeer(server.url, prefix);
  heir = new NodePeer(server.url, prefix);
  await Promise.all([zombie.ask("ping"), heir.ask("ping")]);
});

afterAll(async () => {
  await Promise.all([zombie.close(), heir.close()]);
  await store.close();
  redis.disconnect();
  await server.close();
});

/** Until the lease is gone from Redis: its holder stopped, nobody renews it. */
async function lapsed(session: string, lease: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (await redis.exists(keys.lease(session, lease))) {
    if (Date.now() > deadline) throw new Error(`lease ${lease} never lapsed`);
    await new Promise((done) => setTimeout(done, 5));
  }
}

/** Which check refused the zombie's write, by its message. */
function refusedBy(message: string): string {
  if (message.includes("another holding took it")) return "the store's fence (taken over)";
  if (message.includes("it expired")) return "the store's fence (expired)";
  if (message.includes("wrote first")) return "its append id taken, then its lease";
  if (message.includes("lost its lease")) return "its renewal, before the write";
  return message;
}

async function said(session: string, run: string): Promise<string[]> {
  return (await store.readStream(streamId(session, `run-${run}`))).map((e) => String(e.fields["body"] ?? e.fields["kind"]));
}

describe.each([true, false])("a recorder stopped past its lease (taken over: %s)", (takeover) => {
  it(`writes nothing of what it had queued, in ${ROUNDS} rounds`, async () => {
    const session = `drill-${takeover ? "taken" : "lapsed"}`;
    const refusals = new Map<string, number>();
    for (let n = 0; n < ROUNDS; n++) {
      const run = `r${n}`;
      // Given a process whose run holds a short lease, and has written
      await zombie.ask("run_start", { session, run_id: run, lease_ms: ZOMBIE_TTL_MS });
      await zombie.ask("run_message", { run_id: run, body: "before" });
      // When it is stopped past its lease (and another process takes the run over, and writes)
      zombie.stop();
      try {
        await lapsed(session, `run-${run}`);
        if (takeover) await heir.ask("run_start", { session, run_id: run, lease_ms: HEIR_TTL_MS, resume: true });
        // and continued with its next write already queued
        zombie.send("run_message", { run_id: run, body: "zombie" });
      } finally {
        zombie.resume();
      }
      // Then that write is refused, and nothing of it is stored
      const reply = await zombie.reply();
      expect(reply, `round ${n}`).toMatchObject({ error: "LeaseLost" });
      const why = "message" in reply ? refusedBy(reply.message) : "";
      refusals.set(why, (refusals.get(why) ?? 0) + 1);
      await zombie.ask("run_finish", { run_id: run }); // records no finish: the run is lost
      expect(await said(session, run), `round ${n}`).toEqual(takeover ? ["run.started", "before", "run.resumed"] : ["run.started", "before"]);
      // And the new holder writes on
      if (!takeover) await heir.ask("run_start", { session, run_id: run, lease_ms: HEIR_TTL_MS, resume: true });
      await heir.ask("run_message", { run_id: run, body: "heir" });
      await heir.ask("run_finish", { run_id: run });
      expect(await said(session, run), `round ${n}`).toEqual(["run.started", "before", "run.resumed", "heir", "run.finished"]);
    }
    console.log(`recorder drill, taken over: ${takeover}: ${ROUNDS} rounds, refused:`, Object.fromEntries(refusals));
    expect([...refusals.values()].reduce((a, b) => a + b, 0)).toBe(ROUNDS);
  });
});
