// The canonical bytes, digests and ids every SDK must produce: conformance/canonical.json and
// the RFC 8785 authors' vectors (conformance/jcs/), as tests/contract/test_canonical_json.py and
// tests/contract/test_conformance_vectors.py hold the Python package to them.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";

import { describe, expect, it } from "vitest";

import { canonicalText, checkJson, referenceText } from "../src/model/canonical.js";
import { InvalidEvent } from "../src/model/errors.js";
import { deriveEventId } from "../src/model/ids.js";
import { prepareAppend } from "../src/model/batch.js";
import { unpack } from "../src/model/artifacts.js";

const CONFORMANCE = resolve(import.meta.dirname, "..", "..", "conformance");

interface Vector {
  name: string;
  events: unknown[];
  canonical_events: string[];
  canonical: string;
  sha256: string;
}
const vectors = (JSON.parse(readFileSync(join(CONFORMANCE, "canonical.json"), "utf8")) as { vectors: Vector[] }).vectors;

describe("conformance/canonical.json", () => {
  it.each(vectors.map((v) => [v.name, v] as const))("%s", (_, vector) => {
    const prepared = prepareAppend("s", "x", "a", vector.events);
    expect(prepared.sha256.toString("hex")).toBe(vector.sha256);
    const withoutIds = prepared.fields.map((fields, index) => {
      const given = vector.events[index] as Record<string, unknown>;
      const copy = { ...fields };
      if (!("event_id" in given) || given["event_id"] === null) delete copy["event_id"];
      return canonicalText(copy as never);
    });
    expect(withoutIds).toEqual(vector.canonical_events);
    expect(createHash("sha256").update(vector.canonical).digest("hex")).toBe(vector.sha256);
  });
});

describe("the RFC 8785 authors' vectors", () => {
  const names = readdirSync(join(CONFORMANCE, "jcs", "input")).filter((n) => n.endsWith(".json"));
  it.each(names)("%s", (name) => {
    const value = JSON.parse(readFileSync(join(CONFORMANCE, "jcs", "input", name), "utf8")) as never;
    const expected = readFileSync(join(CONFORMANCE, "jcs", "output", name));
    expect(Buffer.from(canonicalText(value), "utf8").equals(expected)).toBe(true);
  });
});

describe("event ids", () => {
  it("are uuid5 of the namespace and session, stream, append_id and index", () => {
    // uuid.uuid5(EVENT_ID_NAMESPACE, "conf-1\x1frun-a\x1fa1\x1f1") as Python computes it,
    // the id conformance/appends.json expects of the second event of that append.
    expect(deriveEventId("conf-1", "run-a", "a1", 1)).toBe("0a0b1f51-ca79-50c3-b50b-1929cf5a824d");
    expect(deriveEventId("conf-1", "run-a", "a2", 0)).toBe("ad4819aa-a936-5afc-9c17-312bd9a0f148");
  });
});

describe("values JSON cannot carry exactly", () => {
  const cases: [string, unknown, string][] = [
    ["a lone surrogate", { s: "a\ud800" }, "s"],
    ["an integer beyond 2^53-1", { n: 2 ** 53 }, "n"],
    ["NaN", { x: [1, Number.NaN] }, "x[1]"],
    ["a bigint", { b: 1n }, "b"],
    ["undefined in a list", { u: [undefined] }, "u[0]"],
    ["a Date", { d: new Date(0) }, "d"],
    ["a Map", { m: new Map() }, "m"],
  ];
  it.each(cases)("%s is refused with its place", (_, args, where) => {
    const event = { type: "tool_call", agent: "a", tool: "t", attempt_id: "c1", args };
    let caught: unknown;
    try {
      prepareAppend("s", "x", "a", [event]);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(InvalidEvent);
    expect((caught as InvalidEvent).field).toBe(`args.${where}`);
  });

  it("nesting deeper than 128 levels is refused by name, not by the stack", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 10_000; i++) deep = [deep];
    expect(() => { checkJson({ a: deep }); }).toThrow(/nested more than 128 levels/);
    let ok: unknown = 1;
    for (let i = 0; i < 126; i++) ok = [ok];
    expect(() => prepareAppend("s", "x", "a", [{ type: "mutation", agent: "a", kind: "k", v: ok }])).not.toThrow();
  });
});

describe("attempt notes", () => {
  it("an attempt requested and ended in one append is not opened, and its result still closes it", () => {
    const call = { type: "tool_call", agent: "a", tool: "t", attempt_id: "c1" };
    const result = { type: "tool_result", agent: "a", tool: "t", attempt_id: "c1", status: "ok" };
    const notes = prepareAppend("s", "x", "a", [call, result, { ...call, attempt_id: "c2" }]).notes;
    expect(notes).toEqual(["", "c\x1fc1", "o\x1fc2\x1f\x1ft"]);
  });
});

describe("payloads", () => {
  it("are msgpack of the fields with their event ids", () => {
    const prepared = prepareAppend("s", "x", "a1", [{ type: "message", agent: "a", body: "hi", parents: [] }]);
    expect(unpack(prepared.payloads[0] as Buffer)).toEqual({
      type: "message",
      agent: "a",
      body: "hi",
      event_id: deriveEventId("s", "x", "a1", 0),
    });
  });
});

describe("the fast canonical path", () => {
  // Random JSON with what the two paths could disagree on made likely: keys that JavaScript
  // enumerates first ("10", "0"), keys out of order, non-ASCII and astral keys, escapes,
  // numbers of every form (negative zero, exponents, fractions), nesting.
  let seed = 42;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const pick = <T,>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const KEYS = ["a", "b", "B", "z", "10", "9", "0", "01", "€", "😀", "דּ", "\u0080", "key with space", "\n", "_", "aa", "ab"];
  const STRINGS = ["", "x", "é", "😀", '"', "\\", "\u0000", "\u001f", "\u007f", "\u2028", "</script>", "tab\there"];
  const NUMBERS = [0, -0, 1, -1, 0.1, 1e21, 1e-7, 123456789012, 2 ** 53 - 1, -(2 ** 53 - 1), 3.14159, 1e300, 5e-324, 100];
  function value(depth: number): unknown {
    const roll = random();
    if (depth > 4 || roll < 0.3) return pick<unknown>([...STRINGS, ...NUMBERS, true, false, null]);
    if (roll < 0.6) return Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1));
    const out: Record<string, unknown> = {};
    for (let i = Math.floor(random() * 5); i > 0; i--) out[pick(KEYS)] = value(depth + 1);
    return out;
  }
  it("gives the reference's bytes for 5,000 random values", () => {
    for (let i = 0; i < 5000; i++) {
      const v = value(0) as never;
      expect(canonicalText(v)).toBe(referenceText(v));
    }
  });
});
