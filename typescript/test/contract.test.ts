// The store contract (ledger_bus/testing/contract/, ported): every rule of spec/ledger-v1.md and
// the README's command line that a store must keep, over the public API, on memory, a real redis-server
// and a three-node cluster.
import { describe, expect, it } from "vitest";

import {
  ANY,
  eventLine,
  IdempotencyConflict,
  InvalidEvent,
  InvalidInput,
  streamId,
  VersionConflict,
  deriveEventId,
  type EventStore,
  type RecordedEvent,
} from "../src/index.js";
import { call, msg, result } from "./support/events.js";
import { KINDS, stores } from "./support/stores.js";

const { open } = stores();
const REF = streamId("s1", "run-a");
const LEDGER_KEYS = ["session", "stream", "version", "cursor", "type", "agent", "event_id", "recorded_at"];

async function snapshot(store: EventStore, session: string): Promise<Record<string, unknown>[]> {
  return (await store.scanSession(session)).map(eventLine);
}

async function refused(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected the call to be refused");
}

const bodies = (events: RecordedEvent[]): unknown[] => events.map((e) => e.fields["body"]);

const BAD_BATCHES: Record<string, unknown[]> = {
  "unknown type": [{ type: "thought", agent: "a" }],
  "missing field": [{ type: "message", agent: "a" }],
  "missing attempt id": [{ type: "tool_call", agent: "a", tool: "t" }],
  "bad status": [{ type: "tool_result", agent: "a", tool: "t", attempt_id: "x", status: "maybe" }],
  "wrong field type": [{ type: "message", agent: "a", body: 7 }],
  "unknown field on a message": [{ type: "message", agent: "a", body: "x", mood: "ok" }],
  "empty agent": [{ type: "message", agent: "", body: "x" }],
  NaN: [{ type: "tool_call", agent: "a", tool: "t", attempt_id: "x", args: { v: Number.NaN } }],
  Infinity: [{ type: "mutation", agent: "a", kind: "k", score: Number.POSITIVE_INFINITY }],
  "lone surrogate": [{ type: "message", agent: "a", body: "bad \ud800 text" }],
  "surrogate in a key": [{ type: "mutation", agent: "a", kind: "k", data: { "\udfff": 1 } }],
  "integer JSON cannot carry": [{ type: "mutation", agent: "a", kind: "k", n: 2 ** 53 }],
  "reserved mutation field": [{ type: "mutation", agent: "a", kind: "k", version: 3 }],
  "not an object": ["message"],
  "oversized event": [
    { type: "message", agent: "a", body: "x", parents: Array.from({ length: 30_000 }, (_, n) => String(n).padStart(40, "0")) },
  ],
  "empty batch": [],
  "one bad event among good ones": [
    { type: "message", agent: "a", body: "fine" },
    { type: "message", agent: "a", body: "fine too" },
    { type: "message", agent: "a", body: Number.NaN },
  ],
};

describe.each(KINDS)("the contract on %s", (kind) => {
  it("an append assigns consecutive versions and returns the last cursor", async () => {
    const store = open(kind);
    const first = await store.append(REF, 0, "a1", [msg("one"), msg("two")]);
    const second = await store.append(REF, 2, "a2", [msg("three")]);
    expect([first.firstVersion, first.lastVersion, first.deduplicated]).toEqual([1, 2, false]);
    expect([second.firstVersion, second.lastVersion]).toEqual([3, 3]);
    const events = await store.readStream(REF);
    expect(events.map((e) => e.version)).toEqual([1, 2, 3]);
    expect(bodies(events)).toEqual(["one", "two", "three"]);
    expect(events[1]?.cursor).toBe(first.cursor);
    expect(events[2]?.cursor).toBe(second.cursor);
    expect(await store.streamVersion(REF)).toBe(3);
  });

  it("a stream with no events has version zero", async () => {
    const store = open(kind);
    const none = streamId("nobody", "nothing");
    expect(await store.streamVersion(none)).toBe(0);
    expect(await store.readStream(none)).toEqual([]);
    expect(await store.scanSession("nobody")).toEqual([]);
    expect(await store.tail("nobody", { n: 5 })).toEqual([]);
  });

  it("a version conflict reports both versions and writes nothing", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", [msg("one")]);
    const before = await snapshot(store, "s1");
    const err = await refused(store.append(REF, 0, "a2", [msg("two")]));
    expect(err).toBeInstanceOf(VersionConflict);
    expect([(err as VersionConflict).expected, (err as VersionConflict).actual]).toEqual([0, 1]);
    expect(await snapshot(store, "s1")).toEqual(before);
    expect((await store.append(REF, 1, "a2", [msg("two")])).firstVersion).toBe(2);
  });

  it("a retry after a lost reply returns the original result, even with a stale version", async () => {
    const store = open(kind);
    const original = await store.append(REF, 0, "a1", [msg("one"), call("t1")]);
    await store.append(REF, 2, "a2", [msg("later")]);
    const again = await store.append(REF, 0, "a1", [msg("one"), call("t1")]);
    expect(again.deduplicated).toBe(true);
    expect([again.firstVersion, again.lastVersion, again.cursor]).toEqual([
      original.firstVersion,
      original.lastVersion,
      original.cursor,
    ]);
    expect(await store.streamVersion(REF)).toBe(3);
  });

  it("the same append_id with other content is an idempotency conflict", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", [msg("one")]);
    const before = await snapshot(store, "s1");
    expect(await refused(store.append(REF, ANY, "a1", [msg("ONE")]))).toBeInstanceOf(IdempotencyConflict);
    expect(await refused(store.append(REF, 1, "a1", [msg("one"), msg("two")]))).toBeInstanceOf(IdempotencyConflict);
    expect(await snapshot(store, "s1")).toEqual(before);
  });

  it("idempotency compares canonical content, not spelling", async () => {
    const store = open(kind);
    const given = { type: "tool_call", agent: "a", tool: "t", attempt_id: "x", args: { b: 1, a: [1, 2] } };
    const respelled = { args: { a: [1, 2], b: 1 }, attempt_id: "x", tool: "t", agent: "a", type: "tool_call", parents: [], run_id: null };
    const first = await store.append(REF, 0, "a1", [given]);
    expect((await store.append(REF, 0, "a1", [respelled])).deduplicated).toBe(true);
    expect(first.lastVersion).toBe(1);
    expect(await store.streamVersion(REF)).toBe(1);
  });

  it("append_ids are scoped to their stream", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", [msg("one")]);
    expect((await store.append(streamId("s1", "run-b"), 0, "a1", [msg("different")])).deduplicated).toBe(false);
  });

  it("generated event ids are stable across retries, and given ones are kept", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", [msg("one"), msg("two", { event_id: "mine" })]);
    const ids = (await store.readStream(REF)).map((e) => e.fields["event_id"]);
    await store.append(REF, 0, "a1", [msg("one"), msg("two", { event_id: "mine" })]);
    expect(ids[1]).toBe("mine");
    expect((await store.readStream(REF)).map((e) => e.fields["event_id"])).toEqual(ids);
    expect(ids[0]).toBe(deriveEventId("s1", "run-a", "a1", 0));
  });

  it("cursors increase strictly across streams, in commit order", async () => {
    const store = open(kind);
    const order: string[] = [];
    for (let i = 0; i < 30; i++) {
      const done = await store.append(streamId("s1", `run-${i % 3}`), ANY, `x${i}`, [msg(`m${i}`), msg(`n${i}`)]);
      order.push(`m${i}`, `n${i}`);
      expect(done.lastVersion).toBe(2 * (Math.floor(i / 3) + 1));
    }
    const events = await store.scanSession("s1");
    const cursors = events.map((e) => e.cursor);
    expect(bodies(events)).toEqual(order);
    expect(cursors).toEqual([...cursors].sort());
    expect(new Set(cursors).size).toBe(cursors.length);
    for (const name of ["run-0", "run-1", "run-2"]) {
      expect(events.filter((e) => e.stream.name === name).map((e) => e.version)).toEqual(Array.from({ length: 20 }, (_, n) => n + 1));
    }
  });

  it("paging a scan by cursor equals a full scan", async () => {
    const store = open(kind);
    for (let i = 0; i < 57; i++) await store.append(streamId("s1", `r${i % 4}`), ANY, `a${i}`, [msg(String(i))]);
    const full = await snapshot(store, "s1");
    const paged: Record<string, unknown>[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page: RecordedEvent[] = await store.scanSession("s1", { after: cursor, limit: 10 });
      if (!page.length) break;
      paged.push(...page.map(eventLine));
      cursor = (page[page.length - 1] as RecordedEvent).cursor;
    }
    expect(paged).toEqual(full);
    expect(full.length).toBe(57);
  });

  it("read_stream pages by version", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", Array.from({ length: 25 }, (_, i) => msg(String(i))));
    expect((await store.readStream(REF, { after: 20 })).map((e) => e.version)).toEqual([21, 22, 23, 24, 25]);
    expect((await store.readStream(REF, { after: 3, limit: 2 })).map((e) => e.version)).toEqual([4, 5]);
    expect(await store.readStream(REF, { after: 25 })).toEqual([]);
  });

  it("read_stream across many appends and pages returns every version once", async () => {
    const store = open(kind);
    const noise = streamId("s1", "noise");
    for (let i = 0; i < 300; i++) {
      await store.append(REF, ANY, `a${i}`, Array.from({ length: 7 }, (_, k) => msg(`${i}.${k}`)));
      await store.append(noise, ANY, `n${i}`, [msg("noise")]);
    }
    const events = await store.readStream(REF);
    expect(events.map((e) => e.version)).toEqual(Array.from({ length: 2100 }, (_, n) => n + 1));
    expect(new Set(events.map((e) => e.stream.name))).toEqual(new Set(["run-a"]));
    const middle = await store.readStream(REF, { after: 1003, limit: 9 });
    expect(bodies(middle)).toEqual(["143.2", "143.3", "143.4", "143.5", "143.6", "144.0", "144.1", "144.2", "144.3"]);
  });

  it("tail returns the last n, oldest first, and nothing of other sessions", async () => {
    const store = open(kind);
    for (let i = 0; i < 40; i++) {
      const session = i % 2 ? "s1" : "s2";
      await store.append(streamId(session, "main"), ANY, `a${i}`, [msg(`${session}-${i}`)]);
    }
    const last = await store.tail("s1", { n: 5 });
    expect(bodies(last)).toEqual([31, 33, 35, 37, 39].map((i) => `s1-${i}`));
    expect(new Set(last.map((e) => e.stream.sessionId))).toEqual(new Set(["s1"]));
    expect((await store.tail("s1", { n: 100 })).length).toBe(20);
    expect(await store.tail("s1", { n: 0 })).toEqual([]);
  });

  it("recorded events carry every field and the commit time", async () => {
    const store = open(kind);
    const before = Date.now();
    await store.append(REF, 0, "a1", [
      { type: "mutation", agent: "w", kind: "task.done", task_id: "jwt", run_id: "r1", parents: ["e0"] },
      { type: "tool_result", agent: "w", tool: "t", attempt_id: "x", status: "error", result: { error: "boom", n: [1, null, true] } },
    ]);
    const [mutation, done] = await store.readStream(REF);
    const line = eventLine(mutation as RecordedEvent);
    expect(Object.keys(line).slice(0, LEDGER_KEYS.length)).toEqual(LEDGER_KEYS);
    expect([line["task_id"], line["kind"], line["run_id"], line["parents"]]).toEqual(["jwt", "task.done", "r1", ["e0"]]);
    expect(done?.fields["result"]).toEqual({ error: "boom", n: [1, null, true] });
    const at = Date.parse(line["recorded_at"] as string);
    expect(at).toBeGreaterThanOrEqual(before - 1000);
    expect(at).toBeLessThanOrEqual(Date.now() + 1000);
  });

  it.each(Object.keys(BAD_BATCHES))("bad input (%s) is refused and writes nothing", async (name) => {
    const store = open(kind);
    await store.append(REF, 0, "a0", [msg("existing")]);
    const before = await snapshot(store, "s1");
    expect(await refused(store.append(REF, 1, "bad", BAD_BATCHES[name] as unknown[]))).toBeInstanceOf(InvalidEvent);
    expect(await snapshot(store, "s1")).toEqual(before);
    expect((await store.append(REF, 1, "bad", [msg("good")])).firstVersion).toBe(2);
  });

  it("an invalid event's error names the event and the field", async () => {
    const store = open(kind);
    const err = (await refused(store.append(REF, 0, "a1", BAD_BATCHES["one bad event among good ones"] as unknown[]))) as InvalidEvent;
    expect([err.index, err.field]).toEqual([2, "body"]);
    const nested = (await refused(store.append(REF, 0, "a1", [call("x", undefined, "deploy", { nested: { deep: [0, Number.NaN] } })]))) as InvalidEvent;
    expect(nested.field).toBe("args.nested.deep[1]");
  });

  it.each([
    ["a negative version", REF, -1, "a", [msg("x")]],
    ["a version as text", REF, "3", "a", [msg("x")]],
    ["a boolean version", REF, true, "a", [msg("x")]],
    ["an empty append_id", REF, 0, "", [msg("x")]],
    ["no append_id", REF, 0, null, [msg("x")]],
    ["a stream as text", "s1/x", 0, "a", [msg("x")]],
    ["events not a list", REF, 0, "a", { type: "message" }],
  ])("bad arguments (%s) are invalid input", async (_, stream, expected, appendId, events) => {
    const store = open(kind);
    const err = await refused(store.append(stream as never, expected as never, appendId as never, events as never));
    expect(err).toBeInstanceOf(InvalidInput);
    expect(await store.scanSession("s1")).toEqual([]);
  });

  it("too many events in one append is invalid", async () => {
    const store = open(kind);
    const tooMany = Array.from({ length: store.limits.maxEventsPerAppend + 1 }, (_, i) => msg(String(i)));
    expect(await refused(store.append(REF, 0, "a1", tooMany))).toBeInstanceOf(InvalidEvent);
    expect(await store.streamVersion(REF)).toBe(0);
  });

  it("wait_session returns events that commit while it waits", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", [msg("old")]);
    const later = new Promise((done) => setTimeout(() => { done(store.append(REF, 1, "a2", [msg("new")])); }, 200));
    const found = await store.waitSession("s1", { timeoutMs: 5000 });
    await later;
    expect(bodies(found)).toEqual(["new"]);
    expect(await store.waitSession("s1", { after: (found[found.length - 1] as RecordedEvent).cursor, timeoutMs: 50 })).toEqual([]);
  });

  it("the sessions index lists every session written, newest first", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", [msg("one"), msg("two")]);
    await store.append(streamId("s2", "main"), 0, "x", [msg("four")]);
    expect(new Set((await store.sessions()).map(([name]) => name))).toEqual(new Set(["s1", "s2"]));
    expect((await store.sessions({ limit: 1 })).length).toBe(1);
  });

  it("calls open attempts and results close them; a flag names the call it flags", async () => {
    const store = open(kind);
    const opened = await store.append(REF, 0, "a1", [call("c1", "run-1"), call("c2")]);
    await store.append(REF, 2, "a2", [result("c1")]);
    let pending = await store.openAttempts("s1");
    expect(pending.map((a) => [a.attemptId, a.runId, a.tool, a.stream, a.flaggedCursor])).toEqual([["c2", undefined, "deploy", "run-a", undefined]]);
    expect(pending[0]?.cursor).toBe(opened.cursor);
    const flag = { type: "mutation", agent: "r", kind: "reconcile.unresolved", attempt_id: "c2", call_cursor: opened.cursor };
    const flagged = await store.append(streamId("s1", "reconciler"), 0, "f1", [flag]);
    pending = await store.openAttempts("s1");
    expect(pending[0]?.flaggedCursor).toBe(flagged.cursor);
  });

  it("a call and its result in one append open nothing; the result closes an attempt left open", async () => {
    const store = open(kind);
    await store.append(REF, 0, "a1", [call("c1"), result("c1")]);
    expect(await store.openAttempts("s1")).toEqual([]);
    await store.append(REF, 2, "a2", [call("c2")]);
    await store.append(REF, 3, "a3", [call("c2"), result("c2"), call("c3")]);
    expect((await store.openAttempts("s1")).map((a) => a.attemptId)).toEqual(["c3"]);
  });

  it("a field above the threshold is kept as an artifact and read back whole", async () => {
    const store = open(kind);
    const big = "x".repeat(70_000);
    const data = { rows: Array.from({ length: 3000 }, (_, n) => ({ n, label: `row ${n}` })) };
    await store.append(REF, 0, "a1", [msg(big), call("c1", undefined, "t", { data })]);
    const [message, requested] = await store.readStream(REF);
    expect(message?.fields["body"]).toBe(big);
    expect(requested?.fields["args"]).toEqual({ data });
    const refs = await store.readStream(REF, { resolveArtifacts: false });
    const ref = refs[0]?.fields["body"] as { sha256: string; size: number };
    expect(ref.size).toBe(70_000);
    expect((await store.artifact("s1", ref.sha256)).toString()).toBe(big);
    // A retry of the append deduplicates, artifacts and all.
    expect((await store.append(REF, 0, "a1", [msg(big), call("c1", undefined, "t", { data })])).deduplicated).toBe(true);
  });
});

describe.each(["redis", "cluster"] as const)("a server without EVALSHA_RO, on %s", (kind) => {
  it("reads a stream with the two reads the script makes one, the same events", async () => {
    const store = open(kind);
    const noise = streamId("s1", "noise");
    for (let i = 0; i < 40; i++) {
      await store.append(REF, ANY, `a${i}`, Array.from({ length: 3 }, (_, k) => msg(`${i}.${k}`)));
      await store.append(noise, ANY, `n${i}`, [msg("noise")]);
    }
    const byScript = await store.readStream(REF, { after: 7, limit: 50 });
    (store as unknown as { readScript: boolean }).readScript = false; // as a Redis 6 would make it
    const byTwo = await store.readStream(REF, { after: 7, limit: 50 });
    expect(byTwo).toEqual(byScript);
    expect(byTwo.map((e) => e.version)).toEqual(Array.from({ length: 50 }, (_, n) => n + 8));
  });
});
