/**
 * One parser per Lua script this SDK calls (ledger_bus/store/lua/), each turning the raw reply
 * (as ioredis's callBuffer gives it: bulk strings as Buffers, integers as numbers) into a typed
 * value, so that no caller reads a reply by position. The kinds are the scripts' own first
 * elements ("ok", "dup", ...), as the Python parsers (ledger_bus/store/redis/replies.py) name
 * them. A reply of a shape a parser does not know is UnexpectedReply.
 */

import { UnexpectedReply } from "../model/errors.js";

/** A reply's bulk string as text. */
export const text = (value: unknown): string =>
  Buffer.isBuffer(value) ? value.toString("utf8") : String(value);

/** A session log entry as XRANGE gives it: its id and its flat field list. */
export type Entry = [Buffer, Buffer[]];

/**
 * append.lua's reply: "ok" (written), "dup" (written before by this appendId, with the
 * generation of the original), "idem" (the appendId was used for other events), "archived"
 * (the session moved to `where`), "fenced" (the append named a lease holding that is over:
 * the lease's current `token`, 0 for none), "conflict" and "rewound" (the stream's `version`),
 * "noartifact" (an artifact written before the call is gone: the `key`), "noperm" (the ACL
 * refuses `command` on `key`). Nothing is written unless the kind is "ok".
 */
export type AppendReply =
  | { kind: "ok"; first: number; last: number; cursor: string; opened: number; generation: number }
  | { kind: "dup"; first: number; last: number; cursor: string; generation: number }
  | { kind: "idem" }
  | { kind: "archived"; where: string }
  | { kind: "fenced"; token: number }
  | { kind: "conflict"; version: number }
  | { kind: "rewound"; version: number }
  | { kind: "noartifact"; key: string }
  | { kind: "noperm"; command: string; key: string };

/** The reply as an error shows it: short, and readable whatever it holds. */
function shown(reply: unknown): string {
  const text = JSON.stringify(reply, (_, value: unknown) =>
    value !== null && typeof value === "object" && "type" in value && value.type === "Buffer" && "data" in value
      ? Buffer.from(value.data as number[]).toString("utf8")
      : value,
  );
  return text.length > 200 ? `${text.slice(0, 199)}…` : text;
}

function unexpected(script: string, reply: unknown): UnexpectedReply {
  return new UnexpectedReply(`${script} replied ${shown(reply)}: a shape this SDK does not know`);
}

/** Field readers that say which script's reply was malformed. */
class Fields {
  constructor(
    private readonly script: string,
    private readonly reply: unknown[],
  ) {}

  string(at: number): string {
    const value = this.reply[at];
    if (Buffer.isBuffer(value)) return value.toString("utf8");
    if (typeof value === "string") return value;
    throw unexpected(this.script, this.reply);
  }

  integer(at: number): number {
    const value = this.reply[at];
    if (typeof value === "number" && Number.isSafeInteger(value)) return value;
    throw unexpected(this.script, this.reply);
  }

  /** The reply holds exactly `n` elements. */
  length(n: number): this {
    if (this.reply.length !== n) throw unexpected(this.script, this.reply);
    return this;
  }
}

/** append.lua's reply, by its first element. */
export function appendReply(reply: unknown): AppendReply {
  if (!Array.isArray(reply) || !reply.length) throw unexpected("append.lua", reply);
  const read = new Fields("append.lua", reply as unknown[]);
  const kind = read.string(0);
  switch (kind) {
    case "ok":
      read.length(6);
      return {
        kind,
        first: read.integer(1),
        last: read.integer(2),
        cursor: read.string(3),
        opened: read.integer(4),
        generation: read.integer(5),
      };
    case "dup":
      read.length(5);
      return { kind, first: read.integer(1), last: read.integer(2), cursor: read.string(3), generation: read.integer(4) };
    case "idem":
      read.length(1);
      return { kind };
    case "archived":
      read.length(2);
      return { kind, where: read.string(1) };
    case "fenced":
      read.length(2);
      return { kind, token: read.integer(1) };
    case "conflict":
    case "rewound":
      read.length(2);
      return { kind, version: read.integer(1) };
    case "noartifact":
      read.length(2);
      return { kind, key: read.string(1) };
    case "noperm":
      read.length(3);
      return { kind, command: read.string(1), key: read.string(2) };
    default:
      throw unexpected("append.lua", reply);
  }
}

/** A reply of 1 or 0, as `script` gives it: true for 1. */
function flag(script: string, reply: unknown): boolean {
  if (reply === 1 || reply === 0) return reply === 1;
  throw unexpected(script, reply);
}

/**
 * artifact_put.lua's reply: 1 when the artifact is there (true), 0 when the upload is short
 * and must be written again (false).
 */
export function artifactPutReply(reply: unknown): boolean {
  return flag("artifact_put.lua", reply);
}

/**
 * lease.lua's reply: the holding's token (acquire, renew) or 1 (release) when the owner holds
 * the lease afterwards or let it go; 0 when another owner holds it or, for renew and release,
 * it is gone.
 */
export function leaseReply(reply: unknown): number {
  if (typeof reply === "number" && Number.isSafeInteger(reply) && reply >= 0) return reply;
  throw unexpected("lease.lua", reply);
}

/** Whether `value` is a log entry as XRANGE gives it. */
function isEntry(value: unknown): value is Entry {
  return (
    Array.isArray(value) &&
    value.length === 2 &&
    Buffer.isBuffer(value[0]) &&
    Array.isArray(value[1]) &&
    (value[1] as unknown[]).every((field) => Buffer.isBuffer(field))
  );
}

/** read_stream.lua's reply: the log entries, oldest first, as XRANGE gives them (none: []). */
export function readStreamReply(reply: unknown): Entry[] {
  if (Array.isArray(reply) && reply.every(isEntry)) return reply;
  throw unexpected("read_stream.lua", reply);
}

/** prune_consumers.lua's reply: the names of the consumers removed. */
export function pruneConsumersReply(reply: unknown): string[] {
  if (!Array.isArray(reply)) throw unexpected("prune_consumers.lua", reply);
  const read = new Fields("prune_consumers.lua", reply as unknown[]);
  return reply.map((_, at) => read.string(at));
}
