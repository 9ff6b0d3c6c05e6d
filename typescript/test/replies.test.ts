// The parsers of the Lua scripts' replies (store/replies.ts): every shape each script returns,
// as literal replies, then the append, lease, read_stream and artifact_put replies a real
// redis-server gives. A shape no parser knows is UnexpectedReply, never a misread.
import { randomBytes } from "node:crypto";

import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { prepareAppend, RedisStore, UnexpectedReply } from "../src/index.js";
import { luaNotes } from "../src/model/attempts.js";
import {
  appendReply,
  artifactPutReply,
  leaseReply,
  pruneConsumersReply,
  readStreamReply,
} from "../src/store/replies.js";
import { script } from "../src/store/scripts.js";
import { msg } from "./support/events.js";
import { LocalServer } from "./support/servers.js";

const b = (text: string): Buffer => Buffer.from(text, "utf8");
const CURSOR = "1700000000000-0";

describe("append.lua's replies", () => {
  it.each([
    [[b("ok"), 1, 3, b(CURSOR), 2, 0], { kind: "ok", first: 1, last: 3, cursor: CURSOR, opened: 2, generation: 0 }],
    [[b("dup"), 4, 5, b(CURSOR), 1], { kind: "dup", first: 4, last: 5, cursor: CURSOR, generation: 1 }],
    [[b("idem")], { kind: "idem" }],
    [[b("archived"), b("sqlite:///archive.db")], { kind: "archived", where: "sqlite:///archive.db" }],
    [[b("conflict"), 7], { kind: "conflict", version: 7 }],
    [[b("rewound"), 2], { kind: "rewound", version: 2 }],
    [[b("noartifact"), b("lb:{s}:art:ab")], { kind: "noartifact", key: "lb:{s}:art:ab" }],
    [[b("noperm"), b("xadd"), b("lb:{s}:log")], { kind: "noperm", command: "xadd", key: "lb:{s}:log" }],
  ])("%j is read as its kind", (raw, parsed) => {
    expect(appendReply(raw)).toEqual(parsed);
  });

  it("reads text replies as it reads bulk strings", () => {
    expect(appendReply(["conflict", 3])).toEqual({ kind: "conflict", version: 3 });
  });

  it.each([
    ["an unknown kind", [b("maybe"), 1]],
    ["an ok short of its generation", [b("ok"), 1, 3, b(CURSOR), 2]],
    ["a conflict without its version", [b("conflict")]],
    ["a version that is text", [b("rewound"), b("2")]],
    ["an idem with more", [b("idem"), 1]],
    ["an empty reply", []],
    ["no array at all", 1],
    ["a nil", null],
  ])("%s is UnexpectedReply, naming the script", (_, raw) => {
    expect(() => appendReply(raw)).toThrow(UnexpectedReply);
    expect(() => appendReply(raw)).toThrow(/^append\.lua replied .*: a shape this SDK does not know$/);
  });
});

describe("the replies of 1 or 0", () => {
  it("artifact_put.lua: 1 is there, 0 is short", () => {
    expect(artifactPutReply(1)).toBe(true);
    expect(artifactPutReply(0)).toBe(false);
    expect(() => artifactPutReply(2)).toThrow(/^artifact_put\.lua replied 2/);
  });

  it("lease.lua: 1 is held (or let go), 0 is not", () => {
    expect(leaseReply(1)).toBe(true);
    expect(leaseReply(0)).toBe(false);
    expect(() => leaseReply(b("1"))).toThrow(UnexpectedReply);
    expect(() => leaseReply(null)).toThrow(UnexpectedReply);
  });
});

describe("the replies of entries and names", () => {
  it("read_stream.lua: log entries as XRANGE gives them, or none", () => {
    const entry = [b(CURSOR), [b("s"), b("main"), b("v"), b("1"), b("p"), b("\x80")]];
    expect(readStreamReply([entry])).toEqual([entry]);
    expect(readStreamReply([])).toEqual([]);
    expect(() => readStreamReply([[b(CURSOR)]])).toThrow(/^read_stream\.lua replied/);
    expect(() => readStreamReply([[b(CURSOR), [1]]])).toThrow(UnexpectedReply);
    expect(() => readStreamReply(null)).toThrow(UnexpectedReply);
  });

  it("prune_consumers.lua: the names removed", () => {
    expect(pruneConsumersReply([b("a"), b("b")])).toEqual(["a", "b"]);
    expect(pruneConsumersReply([])).toEqual([]);
    expect(() => pruneConsumersReply([1])).toThrow(/^prune_consumers\.lua replied/);
    expect(() => pruneConsumersReply(b("a"))).toThrow(UnexpectedReply);
  });
});

describe("replies from a real redis-server", () => {
  const server = new LocalServer();
  let store: RedisStore;
  beforeAll(async () => {
    await server.start();
    const client = new Redis(server.url);
    store = new RedisStore(client, { prefix: `r${randomBytes(4).toString("hex")}` });
  });
  afterAll(async () => {
    await store.close();
    await server.close();
  });

  /** append.lua called as the store calls it, its raw reply parsed. */
  async function append(stream: string, expected: number, appendId: string, body: string, acknowledged = 0): Promise<unknown> {
    const prepared = prepareAppend("s", stream, appendId, [msg(body)], store.limits);
    const k = store.keys;
    const keys = [k.log("s"), k.meta("s"), k.stream("s", stream), k.idempotency("s", stream), k.openAttempts("s"), k.safeTools("s"), k.tombstone("s")];
    const args = [stream, expected, appendId, prepared.sha256, prepared.payloads.length, acknowledged, "", 0, ...prepared.payloads, luaNotes(prepared.notes)];
    return appendReply(await store.evalsha(script("append"), keys, args));
  }

  it("append.lua: ok, then dup for the same append, idem for other content, conflict, rewound", async () => {
    const ok = await append("main", 0, "a1", "one");
    const cursor = (ok as { cursor: string }).cursor;
    expect(cursor).toMatch(/^\d+-\d+$/);
    expect(ok).toEqual({ kind: "ok", first: 1, last: 1, cursor, opened: 0, generation: 0 });
    expect(await append("main", 0, "a1", "one")).toEqual({ kind: "dup", first: 1, last: 1, cursor, generation: 0 });
    expect(await append("main", 0, "a1", "other")).toEqual({ kind: "idem" });
    expect(await append("main", 0, "a2", "two")).toEqual({ kind: "conflict", version: 1 });
    expect(await append("main", 1, "a3", "three", 5)).toEqual({ kind: "rewound", version: 1 });
  });

  it("lease.lua: held by one owner, refused to another", async () => {
    const keys = [store.keys.lease("s", "run-1")];
    expect(leaseReply(await store.evalsha(script("lease"), keys, ["acquire", "me", 10_000]))).toBe(true);
    expect(leaseReply(await store.evalsha(script("lease"), keys, ["acquire", "you", 10_000]))).toBe(false);
  });

  it("read_stream.lua: the stream's entries; artifact_put.lua: a short upload is 0", async () => {
    await append("side", 0, "b1", "first");
    const keys = [store.keys.stream("s", "side"), store.keys.log("s")];
    const entries = readStreamReply(await store.evalsha(script("read_stream"), keys, [1, 10], true));
    expect(entries).toHaveLength(1);
    expect(readStreamReply(await store.evalsha(script("read_stream"), keys, [2, 10], true))).toEqual([]);
    const upload = [store.keys.artifactUpload("s", "ab".repeat(32), "t"), store.keys.artifact("s", "ab".repeat(32))];
    expect(artifactPutReply(await store.evalsha(script("artifact_put"), upload, [10, 1]))).toBe(false);
  });
});
