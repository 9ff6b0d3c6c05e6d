// The consumer-group tailer: last-N context, then each new event to one consumer at least once,
// takeover of a dead consumer's events, dead letters, filters; in memory, on a server and on a
// cluster.
import { describe, expect, it } from "vitest";

import { ANY, streamId, Tailer, watch, type RecordedEvent } from "../src/index.js";
import { msg } from "./support/events.js";
import { stores } from "./support/stores.js";

const { open } = stores(["memory", "redis", "cluster"]);
const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));
const bodies = (events: RecordedEvent[]): unknown[] => events.map((e) => e.fields["body"]);

describe.each(["memory", "redis", "cluster"] as const)("the tailer on %s", (kind) => {
  it("joins with the last n as context, then hands each new event to one consumer", async () => {
    const store = open(kind);
    const ref = streamId("t", "main");
    for (let i = 0; i < 5; i++) await store.append(ref, ANY, `old${i}`, [msg(`old ${i}`)]);
    const a = new Tailer(store, "t", "agents", "a", { blockMs: 100 });
    const b = new Tailer(store, "t", "agents", "b", { blockMs: 100 });
    expect(bodies(await a.join(3))).toEqual(["old 2", "old 3", "old 4"]);
    await b.join(3);
    for (let i = 0; i < 6; i++) await store.append(ref, ANY, `new${i}`, [msg(`new ${i}`)]);
    const seen: string[] = [];
    const take = async (t: Tailer): Promise<void> => {
      await t.run((event) => { seen.push(String(event.fields["body"])); }, { batches: 1 });
    };
    await take(a);
    await take(b);
    await take(a);
    await take(b);
    expect(seen.sort()).toEqual(Array.from({ length: 6 }, (_, i) => `new ${i}`));
  });

  it("a consumer that died holding events has them taken over, counted", async () => {
    const store = open(kind);
    const ref = streamId("t", "main");
    const dead = new Tailer(store, "t", "g", "dead", { blockMs: 100 });
    await dead.join(0);
    await store.append(ref, 0, "a1", [msg("one"), msg("two")]);
    expect(bodies((await dead.poll()).map((d) => d.event))).toEqual(["one", "two"]); // never acked
    const alive = new Tailer(store, "t", "g", "alive", { blockMs: 100, claimIdleMs: 150 });
    await sleep(200);
    const taken = await alive.poll();
    expect(bodies(taken.map((d) => d.event))).toEqual(["one", "two"]);
    expect(taken.map((d) => d.deliveries)).toEqual([2, 2]);
    await alive.ack(taken);
    expect(await alive.poll()).toEqual([]);
  });

  it("a restarted consumer gets its own unacked events first", async () => {
    const store = open(kind);
    const first = new Tailer(store, "t", "g", "worker", { blockMs: 100 });
    await first.join(0);
    await store.append(streamId("t", "main"), 0, "a1", [msg("one")]);
    await expect(first.run(() => { throw new Error("crash"); }, { batches: 1, errors: "raise" })).rejects.toThrow("crash");
    const again = new Tailer(store, "t", "g", "worker", { blockMs: 100 });
    const own = await again.poll();
    expect(bodies(own.map((d) => d.event))).toEqual(["one"]);
    expect(own[0]?.deliveries).toBe(2);
  });

  it("an event that keeps failing goes to the dead letters", async () => {
    const store = open(kind);
    const tailer = new Tailer(store, "t", "g", "c", { blockMs: 50, maxDeliveries: 2, claimIdleMs: 1 });
    await tailer.join(0);
    await store.append(streamId("t", "main"), 0, "a1", [msg("poison"), msg("fine")]);
    const handled: unknown[] = [];
    for (let i = 0; i < 6; i++) {
      await tailer.run((event) => {
        if (event.fields["body"] === "poison") throw new Error("no");
        handled.push(event.fields["body"]);
      }, { batches: 1 });
      await sleep(5);
    }
    expect(handled).toEqual(["fine"]);
    const letters = await tailer.deadLetters();
    expect(letters.map((l) => [l["reason"], l["version"]])).toEqual([["not acked after 2 deliveries", "1"]]);
  });

  it("events of the skipped agent, or of other types, are acked unseen", async () => {
    const store = open(kind);
    const tailer = new Tailer(store, "t", "g", "c", { blockMs: 50, skipAgent: "me", types: ["message"] });
    await tailer.join(0);
    await store.append(streamId("t", "main"), 0, "a1", [
      msg("mine", {}, "me"),
      { type: "mutation", agent: "x", kind: "k" },
      msg("theirs", {}, "you"),
    ]);
    const seen: unknown[] = [];
    await tailer.run((e) => { seen.push(e.fields["body"]); }, { batches: 1 });
    expect(seen).toEqual(["theirs"]);
    expect(await tailer.poll()).toEqual([]);
  });

  it("watch follows a session as it grows", async () => {
    const store = open(kind);
    const ref = streamId("w", "main");
    const first = await store.append(ref, 0, "a1", [msg("before")]);
    const stop = new AbortController();
    const seen: unknown[] = [];
    const following = (async () => {
      for await (const event of watch(store, "w", first.cursor, { signal: stop.signal, blockMs: 100 })) {
        seen.push(event.fields["body"]);
        if (seen.length === 2) stop.abort();
      }
    })();
    await store.append(ref, 1, "a2", [msg("after 1"), msg("after 2")]);
    await following;
    expect(seen).toEqual(["after 1", "after 2"]);
  });
});
