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
    [[b("fenced"), 3], { kind: "fenced", token: 3 }],
    [[b("fenced"), 0], { kind: "fenced", token: 0 }],
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
    ["a fenced without its token", [b("fenced")]],
    ["a token that is text", [b("fenced"), b("3")]],
    ["an empty reply", []],
    ["no array at all", 1],
    ["a nil", null],
  ])("%s is UnexpectedReply, naming the script", (_, raw) => {
    expect(() => appendReply(raw)).toThrow(UnexpectedReply);
    expect(() => appendReply(raw)).toThrow(/^append\.lua replied .*: a shape this SDK does not know$/);
  });
});

describe("the replies of a flag or a count", () => {
  it("artifact_put.lua: 1 is there, 0 is short", () => {
    expect(artifactPutReply(1)).toBe(true);
    expect(artifactPutReply(0)).toBe(false);
    expect(() => artifactPutReply(2)).toThrow(/^artifact_put\.lua replied 2/);
  });

  it("lease.lua: the holding's token (release: 1), 0 when not held", () => {
    expect(leaseReply(7)).toBe(7);
    expect(leaseReply(1)).toBe(1);
    expect(leaseReply(0)).toBe(0);
    expect(() => leaseReply(-1)).toThrow(UnexpectedReply);
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
  async function append(stream: string, expected: number, appendId: string, body: string, acknowledged = 0, fence = ""): Promise<unknown> {
    const prepared = prepareAppend("s", stream, appendId, [msg(body)], store.limits);
    const k = store.keys;
    const keys = [k.log("s"), k.meta("s"), k.stream("s", stream), k.idempotency("s", stream), k.openAttempts("s"), k.safeTools("s"), k.tombstone("s")];
    const args = [stream, expected, appendId, prepared.sha256, prepared.payloads.length, acknowledged, "", 0, fence, ...prepared.payloads, luaNotes(prepared.notes)];
    return appendReply(await store.evalsha(script("append"), keys, args));
  }

  async function lease(step: string, owner: string, name = "run-1"): Promise<number> {
    const keys = [store.keys.lease("s", name), store.keys.fences("s")];
    return leaseReply(await store.evalsha(script("lease"), keys, [step, owner, 10_000, name]));
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

  it("lease.lua: held by one owner with its token, refused to another; append.lua: fenced once the holding is over", async () => {
    const mine = await lease("acquire", "me");
    expect(mine).toBeGreaterThanOrEqual(1);
    expect(await lease("acquire", "you")).toBe(0);
    expect(await lease("renew", "me")).toBe(mine);
    expect(await append("fenced", 0, "f1", "mine", 0, `run-1\x1fme\x1f${mine}`)).toMatchObject({ kind: "ok" });
    expect(await lease("release", "me")).toBe(1);
    const yours = await lease("acquire", "you");
    expect(yours).toBe(mine + 1);
    expect(await append("fenced", 1, "f2", "zombie", 0, `run-1\x1fme\x1f${mine}`)).toEqual({ kind: "fenced", token: yours });
    expect(await append("fenced", 1, "f2", "yours", 0, `run-1\x1fyou\x1f${yours}`)).toMatchObject({ kind: "ok", last: 2 });
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
