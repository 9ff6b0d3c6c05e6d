// The scripts' calling convention is written down once, in ledger_bus/store/lua/protocol.json
// (the package carries a copy in lua/): each key builder and reply parser of the scripts this
// SDK runs is held to it here, as tests/contract/test_script_protocol.py holds Python's and
// go/store/redisstore/protocol_test.go Go's.
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { crc32 } from "node:zlib";

import { describe, expect, it } from "vitest";

import { UnexpectedReply } from "../src/index.js";
import { Keys } from "../src/store/keys.js";
import {
  appendReply,
  artifactPutReply,
  leaseReply,
  pruneConsumersReply,
  readStreamReply,
} from "../src/store/replies.js";
import { luaDirectory } from "../src/store/scripts.js";

type Field = [string, "int" | "text"];
interface Script {
  keys: string[];
  optional_keys?: string[];
  reply: Record<string, Field[]> | string;
}
interface Protocol {
  keys: Record<string, string>;
  scripts: Record<string, Script>;
}

const ORIGINAL = resolve(import.meta.dirname, "..", "..", "ledger_bus", "store", "lua", "protocol.json");
const text = readFileSync(join(luaDirectory(), "protocol.json"), "utf8");
const protocol = JSON.parse(text) as Protocol;

// What each placeholder of a key's template is here; a starred key is one per item of its list.
const SAMPLE = {
  prefix: "lb",
  session: "S1",
  stream: "run-r1",
  sha256: "ab".repeat(32),
  token: "t0k",
  name: "run-r1",
  group: "g1",
  bucket: String(crc32("S1") % 64).padStart(2, "0"),
} as const;
const ARTIFACTS = ["cd".repeat(32), "ef".repeat(32)];
const LISTS: Record<string, [string, string[]]> = { artifact: ["sha256", ARTIFACTS] };

function render(family: string, given: Record<string, string> = {}): string {
  const template = protocol.keys[family];
  if (template === undefined) throw new Error(`protocol.json has no key ${family}`);
  const values: Record<string, string> = { ...SAMPLE, ...given };
  return template.replace(/<(\w+)>/g, (_, name: string) => values[name] ?? `<${name}>`);
}

function keysOf(entries: string[]): string[] {
  return entries.flatMap((entry) => {
    if (!entry.endsWith("*")) return [render(entry)];
    const family = entry.slice(0, -1);
    const list = LISTS[family];
    if (list === undefined) throw new Error(`no sample list for ${entry}`);
    const [placeholder, items] = list;
    return items.map((item) => render(family, { [placeholder]: item }));
  });
}

function described(script: string): Script {
  const found = protocol.scripts[script];
  if (found === undefined) throw new Error(`protocol.json does not describe ${script}`);
  return found;
}

it("the package's copy of protocol.json is the repository's, byte for byte", () => {
  expect(text).toBe(readFileSync(ORIGINAL, "utf8"));
});

describe("each script's KEYS", () => {
  const keys = new Keys(SAMPLE.prefix);
  const { session, stream, sha256, token, name } = SAMPLE;
  // Every script this SDK runs, by its builder.
  it.each([
    ["append", keys.appendKeys(session, stream)],
    ["artifact_put", keys.artifactPutKeys(session, sha256, token)],
    ["lease", keys.leaseKeys(session, name)],
    ["read_stream", keys.readStreamKeys(session, stream)],
    ["prune_consumers", keys.pruneConsumersKeys(session)],
  ])("%s's are built as the protocol says", (script, built) => {
    expect(built).toEqual(keysOf(described(script).keys));
  });

  it("an append's artifacts' are built as the protocol says", () => {
    expect(keys.artifactKeys(session, ARTIFACTS)).toEqual(keysOf(described("append").optional_keys ?? []));
  });
});

/** A reply of `kind` as ioredis's callBuffer gives it, and its fields' values. */
function sampleReply(kind: string, fields: Field[]): [unknown[], Record<string, unknown>] {
  const values: Record<string, unknown> = {};
  const raw: unknown[] = [Buffer.from(kind)];
  fields.forEach(([field, type], at) => {
    const value = type === "int" ? 11 + at : `${field}-${at}`;
    values[field] = value;
    raw.push(typeof value === "string" ? Buffer.from(value) : value);
  });
  return [raw, values];
}

describe("append.lua's replies", () => {
  const kinds = described("append").reply as Record<string, Field[]>;

  it.each(Object.entries(kinds))("%s is read with the fields the protocol names", (kind, fields) => {
    const [raw, values] = sampleReply(kind, fields);
    expect(appendReply(raw)).toEqual({ kind, ...values });
  });

  it.each(Object.entries(kinds))("%s unlike the protocol is unexpected", (kind, fields) => {
    const [raw] = sampleReply(kind, fields);
    const odd: unknown[][] = [[...raw, Buffer.from("more")]];
    if (fields.length) odd.push(raw.slice(0, -1));
    fields.forEach(([, type], at) => {
      const wrong = [...raw];
      wrong[at + 1] = type === "int" ? Buffer.from("12") : 12;
      odd.push(wrong);
    });
    for (const reply of odd) expect(() => appendReply(reply), String(reply)).toThrow(UnexpectedReply);
  });

  it("a kind the protocol does not list is unexpected", () => {
    expect(() => appendReply([Buffer.from("nosuchkind")])).toThrow(UnexpectedReply);
  });
});

describe("the replies of one value or a list", () => {
  it("are the shapes these parsers read", () => {
    const shapes = ["artifact_put", "lease", "read_stream", "prune_consumers"].map((s) => described(s).reply);
    expect(shapes).toEqual(["flag", "integer", "entries", "names"]);
  });

  it("are read as the protocol says", () => {
    expect([artifactPutReply(1), artifactPutReply(0)]).toEqual([true, false]);
    for (const raw of [2, -1, Buffer.from("1"), null]) expect(() => artifactPutReply(raw)).toThrow(UnexpectedReply);
    expect([0, 1, 7].map(leaseReply)).toEqual([0, 1, 7]);
    for (const raw of [-1, Buffer.from("7"), null]) expect(() => leaseReply(raw)).toThrow(UnexpectedReply);
    const entry = [Buffer.from("1-0"), [Buffer.from("s"), Buffer.from("run-r1")]];
    expect(readStreamReply([entry])).toEqual([entry]);
    for (const raw of [[[Buffer.from("1-0")]], [[1, []]], Buffer.from("x"), null]) {
      expect(() => readStreamReply(raw)).toThrow(UnexpectedReply);
    }
    expect(pruneConsumersReply([Buffer.from("a"), Buffer.from("b")])).toEqual(["a", "b"]);
    for (const raw of [Buffer.from("a"), [1], null]) expect(() => pruneConsumersReply(raw)).toThrow(UnexpectedReply);
  });
});
