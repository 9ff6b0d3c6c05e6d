/**
 * RFC 8785 canonical bytes and content digests.
 *
 * The digest of an append is what makes a retry idempotent, so every SDK must produce the same
 * bytes for the same events: `canonicalize` (by one of the RFC's authors) writes them, once the
 * value is checked to be plain JSON that RFC 8785 carries exactly, as the Python package checks
 * it (ledger_bus/model/canonical.py): no nesting deeper than 128 levels, integers within
 * +-(2^53-1), valid Unicode, nothing that is not a JSON value.
 */

import { createHash } from "node:crypto";

import canonicalize from "canonicalize";

export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER;
/** How deeply objects and arrays may nest in an event, the event itself being level 1. */
export const MAX_DEPTH = 128;

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A value JSON cannot carry exactly; `path` says where, innermost first. */
export class JsonValueError extends Error {
  readonly path: string[] = [];

  get where(): string {
    let steps = [...this.path].reverse();
    if (steps.length > 12) {
      steps = [...steps.slice(0, 6), `...(${steps.length - 8} more)...`, ...steps.slice(-2)];
    }
    return steps.join("").replace(/^\.+/, "");
  }
}

/** A plain object: made by a literal, JSON.parse or Object.create(null), not a class. */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

function kindOf(value: unknown): string {
  if (value === null) return "null";
  // "[object Date]" -> "Date": the class a value was made by, or "Object".
  return typeof value === "object" ? Object.prototype.toString.call(value).slice(8, -1) : typeof value;
}

/** Throw JsonValueError unless `value` (standing at nesting level `depth`) is plain JSON. */
export function checkJson(value: unknown, depth = 1): asserts value is Json {
  switch (typeof value) {
    case "string":
      if (!value.isWellFormed()) {
        throw new JsonValueError("string is not valid Unicode (a lone surrogate)");
      }
      return;
    case "boolean":
      return;
    case "number":
      if (!Number.isFinite(value)) throw new JsonValueError(`${value} is not a JSON number`);
      // A JavaScript number cannot say whether it was written as an integer: one whose RFC 8785
      // form is an integer beyond +-(2^53-1) (below 10^21, where the form turns to exponents)
      // is refused, as the Python package refuses such integers. 1e21 and above print as
      // floats everywhere, and are kept.
      if (Number.isInteger(value) && !Number.isSafeInteger(value) && Math.abs(value) < 1e21) {
        throw new JsonValueError(
          "integer outside +-(2**53-1), which JSON cannot carry exactly",
        );
      }
      return;
    case "bigint":
      throw new JsonValueError("bigint is not a JSON value; give a number within +-(2**53-1)");
    case "object":
      break;
    default:
      throw new JsonValueError(`${typeof value} is not a JSON value`);
  }
  if (value === null) return;
  const array = Array.isArray(value);
  if (!array && !isPlainObject(value)) {
    throw new JsonValueError(`${kindOf(value)} is not a JSON value`);
  }
  if (depth > MAX_DEPTH) throw new JsonValueError(`nested more than ${MAX_DEPTH} levels deep`);
  if (array) {
    for (let index = 0; index < value.length; index++) {
      try {
        checkJson(value[index], depth + 1);
      } catch (err) {
        if (err instanceof JsonValueError) err.path.push(`[${index}]`);
        throw err;
      }
    }
    return;
  }
  for (const key of Object.keys(value)) {
    if (!key.isWellFormed()) {
      const err = new JsonValueError("object key is not valid Unicode (a lone surrogate)");
      throw err;
    }
    try {
      checkJson((value)[key], depth + 1);
    } catch (err) {
      if (err instanceof JsonValueError) err.path.push(`.${key}`);
      throw err;
    }
  }
}

// A key JavaScript enumerates before all others, in numeric order, whatever order it was set in.
const INDEX_KEY = /^(?:0|[1-9][0-9]*)$/;

/**
 * `value` with every object's keys in RFC 8785 order (UTF-16 code units, as Array.sort has
 * them), objects already in that order kept as they are; null when some object has a key
 * JavaScript would enumerate out of that order (an array-index-like key such as "10").
 */
function inKeyOrder(value: Json): Json | null {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) {
    let copy: Json[] | null = null;
    for (let at = 0; at < value.length; at++) {
      const item = value[at] as Json;
      const sorted = inKeyOrder(item);
      if (sorted === null && item !== null) return null;
      if (sorted !== item) {
        copy ??= value.slice();
        copy[at] = sorted;
      }
    }
    return copy ?? value;
  }
  const keys = Object.keys(value);
  let ordered = true;
  for (let at = 0; at < keys.length; at++) {
    const key = keys[at] as string;
    if (INDEX_KEY.test(key)) return null;
    if (at && (keys[at - 1] as string) > key) ordered = false;
  }
  const items: [string, Json][] = [];
  let changed = !ordered;
  for (const key of ordered ? keys : keys.sort()) {
    const item = value[key] as Json;
    const sorted = inKeyOrder(item);
    if (sorted === null && item !== null) return null;
    if (sorted !== item) changed = true;
    items.push([key, sorted]);
  }
  return changed ? Object.fromEntries(items) : value;
}

/**
 * The RFC 8785 text of a value already checked by `checkJson`. RFC 8785 writes numbers and
 * strings as ECMAScript's JSON.stringify does, and object keys sorted: JSON.stringify of the
 * value with its keys put in order gives its bytes, several times faster than `canonicalize`
 * (the reference, by one of the RFC's authors), which takes what that cannot: objects with
 * array-index-like keys. A property test holds the two equal (test/canonical.test.ts).
 */
export function canonicalText(value: Json): string {
  const sorted = inKeyOrder(value);
  if (sorted === null && value !== null) return canonicalize(value) as string;
  return JSON.stringify(sorted);
}

/** The reference's text, for the tests that hold the fast path to it. */
export function referenceText(value: Json): string {
  return canonicalize(value) as string;
}

/** The RFC 8785 bytes of `value`; JsonValueError naming any fault. */
export function canonicalBytes(value: unknown): Buffer {
  checkJson(value);
  return Buffer.from(canonicalText(value), "utf8");
}

/**
 * The sha256 (raw bytes) of the canonical JSON array whose elements are `parts`: RFC 8785 writes
 * an array as its elements' forms joined by commas.
 */
export function digestOfParts(parts: Buffer[]): Buffer {
  const hash = createHash("sha256").update("[");
  parts.forEach((part, index) => {
    if (index) hash.update(",");
    hash.update(part);
  });
  return hash.update("]").digest();
}
