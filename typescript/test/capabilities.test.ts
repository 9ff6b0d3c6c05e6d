// Capabilities: a store says what it has besides its log, and a caller that needs more is
// refused in one line. Given a store written elsewhere that keeps only the log, the log's
// operations work, and a Tailer (consumer groups) or a Recorder (leases) refuses it.
import { describe, expect, it } from "vitest";

import {
  ANY,
  type Capability,
  capabilitiesOf,
  has,
  type Log,
  MemoryStore,
  need,
  Recorder,
  type RecordedEvent,
  streamId,
  Tailer,
  Unsupported,
  watch,
} from "../src/index.js";
import { msg } from "./support/events.js";
import { KINDS, stores } from "./support/stores.js";

/** A store of the log alone, as a user might write one: here, the memory store's log, passed through. */
class LogOnly implements Log {
  readonly tier = "custom";
  readonly capabilities: ReadonlySet<Capability> = new Set<Capability>(["log"]);
  private readonly inner = new MemoryStore();

  append: Log["append"] = (...args) => this.inner.append(...args);
  readStream: Log["readStream"] = (...args) => this.inner.readStream(...args);
  scanSession: Log["scanSession"] = (...args) => this.inner.scanSession(...args);
  iterSession: Log["iterSession"] = (...args) => this.inner.iterSession(...args);
  tail: Log["tail"] = (...args) => this.inner.tail(...args);
  waitSession: Log["waitSession"] = (...args) => this.inner.waitSession(...args);
  streamVersion: Log["streamVersion"] = (...args) => this.inner.streamVersion(...args);
  sessions: Log["sessions"] = (...args) => this.inner.sessions(...args);
  artifact: Log["artifact"] = (...args) => this.inner.artifact(...args);
  resolve: Log["resolve"] = (...args) => this.inner.resolve(...args);
  close: Log["close"] = () => this.inner.close();
}

const REF = streamId("s", "main");
const bodies = (events: RecordedEvent[]): unknown[] => events.map((e) => e.fields["body"]);

/** What `make()` threw, for a look at its class and message. */
function thrown(make: () => unknown): Error {
  try {
    make();
  } catch (err) {
    return err as Error;
  }
  throw new Error("nothing was thrown");
}

describe("a store with the log alone", () => {
  it("appends, reads, scans, tails, waits and lists as any store", async () => {
    const store = new LogOnly();
    const first = await store.append(REF, 0, "a1", [msg("one"), msg("two")]);
    await store.append(REF, 2, "a2", [msg("three")]);
    expect(bodies(await store.readStream(REF, { after: 1 }))).toEqual(["two", "three"]);
    expect(bodies(await store.scanSession("s", { after: first.cursor }))).toEqual(["three"]);
    expect(bodies(await store.tail("s", { n: 2 }))).toEqual(["two", "three"]);
    expect(bodies(await store.waitSession("s", { after: first.cursor, timeoutMs: 10 }))).toEqual(["three"]);
    expect(await store.streamVersion(REF)).toBe(3);
    expect((await store.sessions()).map(([id]) => id)).toEqual(["s"]);
    const stop = new AbortController();
    const later = setTimeout(() => void store.append(REF, ANY, "a3", [msg("four")]), 50);
    for await (const event of watch(store, "s", first.cursor, { signal: stop.signal, blockMs: 100 })) {
      if (event.fields["body"] === "four") stop.abort();
    }
    clearTimeout(later);
    await store.close();
  });

  it("declares the log and nothing else", () => {
    const store = new LogOnly();
    expect(has(store, "log")).toBe(true);
    expect(has(store, "attempts")).toBe(false);
    expect(has(store, "groups")).toBe(false);
    expect(need(store, "log")).toBe(store);
    expect(capabilitiesOf(store)).toEqual(["log"]);
  });

  it("is refused by a Tailer in one line: it has no consumer groups", () => {
    const err = thrown(() => new Tailer(new LogOnly(), "s", "agents", "a"));
    expect(err).toBeInstanceOf(Unsupported);
    expect(err.message).toBe("this store (custom) has no consumer groups: it has log");
  });

  it("is refused by a Recorder in one line: it has no leases", () => {
    const err = thrown(() => new Recorder(new LogOnly(), "s", "coder"));
    expect(err).toBeInstanceOf(Unsupported);
    expect(err.message).toBe("this store (custom) has no leases and open attempts: it has log");
  });

  it("is refused by need() for each capability it lacks, by name", () => {
    const store = new LogOnly();
    expect(thrown(() => need(store, "groups")).message).toBe("this store (custom) has no consumer groups: it has log");
    expect(thrown(() => need(store, "attempts"))).toBeInstanceOf(Unsupported);
  });
});

describe("a store that declares nothing (plain JavaScript)", () => {
  it("is refused by name, not with a TypeError", () => {
    const bare = { tier: "bare" } as unknown as Log;
    expect(has(bare, "log")).toBe(false);
    expect(thrown(() => new Tailer(bare, "s", "agents", "a")).message).toBe(
      "this store (bare) has no consumer groups: it has none of the contract's capabilities",
    );
  });
});

const { open } = stores();

describe.each(KINDS)("the %s store", (kind) => {
  it("declares the log, attempts and groups, and serves each one asked for", async () => {
    const store = open(kind);
    expect([...store.capabilities].sort()).toEqual(["attempts", "groups", "log"]);
    expect(need(store, "groups").groups).toBe(store.groups);
    expect(await need(store, "attempts").openAttempts("s")).toEqual([]);
  });
});
