/** Names and identifiers: stream references, commit cursors, generated event ids. */

import { createHash, type Hash } from "node:crypto";

import { InvalidInput } from "./errors.js";

// Session ids and stream names become parts of Redis keys: braces would move the hash tag (and
// so the slot), whitespace and control characters break one-line output, a lone surrogate cannot
// be encoded. The same rule as the Python package's; whitespace is spelled out as Python's \s
// has it (JavaScript's \s also holds U+FEFF, which Python's does not).
const NAME =
  /^[^\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000{}\x00-\x1f\x7f-\x9f]{1,200}$/u;

/** Cursors are the session log's entry ids padded to a fixed width: they sort as strings. */
export const CURSOR_PATTERN = /^([0-9]{1,13})-([0-9]{1,6})$/;
export const CURSOR_ZERO = "0000000000000-000000";

/** uuid5 namespace of the event ids the ledger generates (spec/ledger-v1.md). */
export const EVENT_ID_NAMESPACE = "5c1b6a0e-4f3a-5d8e-9b2c-7a6e0d1f2b3c";
const NAMESPACE_BYTES = Buffer.from(EVENT_ID_NAMESPACE.replaceAll("-", ""), "hex");

/** The `expectedVersion` that accepts any version. */
export const ANY = "any" as const;
export type ExpectedVersion = number | typeof ANY;

/** One optimistic-concurrency partition of a session. */
export interface StreamId {
  readonly sessionId: string;
  readonly name: string;
}

/** A StreamId, its names checked. */
export function streamId(sessionId: string, name: string): StreamId {
  checkName(sessionId, "session id");
  checkName(name, "stream name");
  return Object.freeze({ sessionId, name });
}

export function streamText(stream: StreamId): string {
  return `${stream.sessionId}/${stream.name}`;
}

/** A value as an error message quotes it, cut to `width` characters. */
export function quoted(value: unknown, width = 80): string {
  let text: string;
  if (typeof value === "string") {
    text = `'${value}'`;
  } else {
    try {
      const json: unknown = JSON.stringify(value); // undefined for a function, a symbol
      text = typeof json === "string" ? json : String(value);
    } catch {
      text = Object.prototype.toString.call(value);
    }
  }
  if (text.length <= width) return text;
  const size = typeof value === "string" ? ` of ${value.length} characters` : "";
  return `${text.slice(0, width)}… (cut${size})`;
}

/** `value` when it is a usable session id or stream name, else InvalidInput. */
export function checkName(value: unknown, what: string): string {
  if (typeof value !== "string" || !isNameText(value)) {
    throw new InvalidInput(
      `${what} must be 1-200 characters with no whitespace, control characters or braces;` +
        ` got ${quoted(value)}`,
    );
  }
  return value;
}

function isNameText(value: string): boolean {
  // The pattern counts code points (the u flag); a lone surrogate fails it.
  return value.isWellFormed() && NAME.test(value);
}

export function checkStream(value: unknown): StreamId {
  if (typeof value !== "object" || value === null) {
    throw new InvalidInput(`stream must be a StreamId, got ${quoted(value)}`);
  }
  const { sessionId, name } = value as Partial<StreamId>;
  return streamId(sessionId as string, name as string);
}

/** The expected version as a number, or undefined for ANY; InvalidInput otherwise. */
export function checkExpectedVersion(value: unknown): number | undefined {
  if (value === ANY) return undefined;
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return value;
  throw new InvalidInput(`expectedVersion must be an int >= 0 or ANY, got ${quoted(value)}`);
}

/** A usable appendId, else InvalidInput. */
export function checkAppendId(value: unknown): string {
  if (
    typeof value !== "string" ||
    value.length === 0 ||
    codePoints(value) > 512 ||
    !value.isWellFormed()
  ) {
    throw new InvalidInput(
      "appendId must be a non-empty string of at most 512 characters of valid Unicode," +
        ` got ${quoted(value)}`,
    );
  }
  return value;
}

/** How many code points `text` holds, as Python's len() counts a string. */
export function codePoints(text: string): number {
  let count = 0;
  for (let at = 0; at < text.length; at++) {
    const unit = text.charCodeAt(at);
    // A high surrogate followed by a low one is one code point.
    if (unit >= 0xd800 && unit <= 0xdbff && at + 1 < text.length) {
      const next = text.charCodeAt(at + 1);
      if (next >= 0xdc00 && next <= 0xdfff) at++;
    }
    count++;
  }
  return count;
}

export function formatCursor(ms: number, seq: number): string {
  return `${String(ms).padStart(13, "0")}-${String(seq).padStart(6, "0")}`;
}

/** [ms, seq] of a cursor; InvalidInput for anything that is not one. */
export function parseCursor(cursor: unknown): [number, number] {
  const match = typeof cursor === "string" ? CURSOR_PATTERN.exec(cursor) : null;
  if (match === null) throw new InvalidInput(`not a cursor: ${quoted(cursor)}`);
  return [Number(match[1]), Number(match[2])];
}

/**
 * The cursors of `count` events committed at `nowMs` after `last`, as Redis takes stream ids:
 * the clock, but never at or below the last one.
 */
export function cursorsAfter(last: string, nowMs: number, count: number): string[] {
  let [ms, seq] = parseCursor(last);
  const found: string[] = [];
  for (let i = 0; i < count; i++) {
    if (nowMs > ms) [ms, seq] = [nowMs, 0];
    else seq += 1;
    found.push(formatCursor(ms, seq));
  }
  return found;
}

/** The commit time of a cursor in milliseconds since the epoch. */
export function cursorMs(cursor: string): number {
  return Number(cursor.slice(0, 13));
}

/** The cursor of a Redis stream entry id ("<ms>-<seq>"). */
export function ledgerCursor(entryId: string): string {
  const at = entryId.indexOf("-");
  return `${entryId.slice(0, at).padStart(13, "0")}-${entryId.slice(at + 1).padStart(6, "0")}`;
}

/** The Redis entry id of a cursor. */
export function redisCursor(cursor: string): string {
  const [ms, seq] = parseCursor(cursor);
  return `${ms}-${seq}`;
}

const VARIANT = "89ab";

/**
 * index -> the id of an event of this append that came without one: uuid5(EVENT_ID_NAMESPACE,
 * session, stream, append_id and index joined by U+001F), the same for every retry of the
 * append and in every SDK. The hash of the common prefix is made once and copied per event.
 */
export function eventIdDeriver(
  sessionId: string,
  stream: string,
  appendId: string,
): (index: number) => string {
  const common: Hash = createHash("sha1").update(NAMESPACE_BYTES);
  common.update(Buffer.from([sessionId, stream, appendId, ""].join("\x1f"), "utf8"));
  return (index: number): string => {
    const h = common.copy().update(String(index)).digest("hex");
    const variant = VARIANT[parseInt(h[16] as string, 16) & 3] as string;
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
  };
}

export function deriveEventId(
  sessionId: string,
  stream: string,
  appendId: string,
  index: number,
): string {
  return eventIdDeriver(sessionId, stream, appendId)(index);
}
