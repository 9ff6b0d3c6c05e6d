// The Pi adapter's fencing drill (the reported bug): a Pi process holding a session with a short
// lease is stopped (SIGSTOP) past it, continued (SIGCONT) with a prompt already queued on its
// stdin, and its turn is refused (PiSessionTaken, one line) with nothing of it stored, whether
// another Pi process opened the session meanwhile or nobody did; the holder of the session is
// never refused for what the stopped one tried. 50 rounds each, two long-lived processes, a Pi
// session a round. On Node 22 (npm run test:pi), as Pi 1.x is.
import { randomBytes } from "node:crypto";

import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { connect, type ConnectedStore, type RecordedEvent, streamId } from "../src/index.js";
import { Keys } from "../src/store/keys.js";
import { NodePeer } from "./support/nodepeer.js";
import { LocalServer } from "./support/servers.js";

const ROUNDS = 50;
// The stopped process's lease: short, so that a round is short, and long enough that a loaded
// machine does not let it lapse before the stop.
const ZOMBIE_TTL_MS = 500;
const HEIR_TTL_MS = 10_000; // the new holder's: it must not lapse while a round looks on

const server = new LocalServer();
const prefix = `p${randomBytes(4).toString("hex")}`;
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
  // Pi loaded and a turn taken once in each, so that no round pays for it inside a short lease.
  await Promise.all(
    [zombie, heir].map(async (peer) => {
      const piSession = await peer.ask("pi_open", { session: "warm", lease_ms: HEIR_TTL_MS });
      await peer.ask("pi_turn", { pi_session: piSession, prompt: "warm", answer: "up" });
      await peer.ask("pi_close", { pi_session: piSession });
    }),
  );
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

/** What the users and the model said in the session, in order, from its Pi entries. */
function conversation(events: RecordedEvent[]): string[] {
  const texts: string[] = [];
  for (const event of events) {
    const entry = event.fields["entry"] as { type?: string; message?: { role: string; content: unknown } } | undefined;
    if (event.fields["kind"] !== "pi.entry" || entry?.type !== "message" || !entry.message) continue;
    const { role, content } = entry.message;
    if (role !== "user" && role !== "assistant") continue;
    texts.push(typeof content === "string" ? content : (content as { text?: string }[]).map((c) => c.text ?? "").join(""));
  }
  return texts;
}

describe.each([true, false])("a Pi process stopped past its session's lease (taken over: %s)", (takeover) => {
  it(`writes nothing of its queued turn, in ${ROUNDS} rounds`, async () => {
    const session = `pi-drill-${takeover ? "taken" : "lapsed"}`;
    const refusals = new Map<string, number>();
    for (let n = 0; n < ROUNDS; n++) {
      // Given a Pi process holding a session with a short lease, a turn taken
      const piSession = (await zombie.ask("pi_open", { session, lease_ms: ZOMBIE_TTL_MS })) as string;
      await zombie.ask("pi_turn", { pi_session: piSession, prompt: "one", answer: "first's answer" });
      // When it is stopped past its lease (and another Pi process opens the session: run.started)
      zombie.stop();
      try {
        await lapsed(session, `run-pi.${piSession}`);
        if (takeover) await heir.ask("pi_open", { session, pi_session: piSession, lease_ms: HEIR_TTL_MS });
        // and continued with a prompt already queued
        zombie.send("pi_turn", { pi_session: piSession, prompt: `zombie ${n}`, answer: `zombie's answer ${n}` });
      } finally {
        zombie.resume();
      }
      // Then its turn is refused in one line that says what happened
      const reply = await zombie.reply();
      expect(reply, `round ${n}`).toMatchObject({ error: "PiSessionTaken" });
      const message = "message" in reply ? reply.message : "";
      expect(message).not.toContain("\n");
      if (takeover) {
        expect(message, `round ${n}`).toMatch(new RegExp(`^Pi session ${piSession} was taken over by another process`));
      } else {
        expect(message, `round ${n}`).toMatch(new RegExp(`^Pi session ${piSession} lost its lease: it expired`));
        expect(message, `round ${n}`).not.toMatch(/taken over|another process (holds|took)/);
      }
      // Which check refused it: the store's fence names the tokens; a version conflict does not.
      const by = message.includes("token") ? "the store's fence (taken over)" : message.includes("expired") ? "the store's fence (expired)" : message;
      refusals.set(by, (refusals.get(by) ?? 0) + 1);
      await zombie.ask("pi_close", { pi_session: piSession }).catch(() => undefined); // told again; writes nothing
      // And nothing of it is stored
      const stream = streamId(session, `pi.${piSession}`);
      expect(JSON.stringify(await store.readStream(stream)), `round ${n}`).not.toContain("zombie");
      // And the holder of the session goes on, never refused for what the stopped one tried
      if (!takeover) await heir.ask("pi_open", { session, pi_session: piSession, lease_ms: HEIR_TTL_MS });
      await heir.ask("pi_turn", { pi_session: piSession, prompt: "two", answer: "second's answer" });
      await heir.ask("pi_close", { pi_session: piSession });
      const events = await store.readStream(stream);
      expect(conversation(events), `round ${n}`).toEqual(["one", "first's answer", "two", "second's answer"]);
      expect(events.filter((e) => e.fields["kind"] === "run.finished"), `round ${n}`).toHaveLength(1);
    }
    console.log(`Pi drill, taken over: ${takeover}: ${ROUNDS} rounds, turns refused:`, Object.fromEntries(refusals));
    expect([...refusals.values()].reduce((a, b) => a + b, 0)).toBe(ROUNDS);
  });
});
