/**
 * The fixed vocabulary of four event types (spec/ledger-v1.md), checked as strictly as the
 * Python package's models check it: no coercion, no unknown fields except on `mutation`, whose
 * fields are the session state it records.
 */

import { isPlainObject } from "./canonical.js";
import { InvalidEvent } from "./errors.js";
import { quoted } from "./ids.js";

export const EVENT_TYPES = ["message", "tool_call", "tool_result", "mutation"] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Names the ledger sets on every recorded event; a mutation field may not shadow them. */
export const RESERVED_FIELDS = new Set(["session", "stream", "version", "cursor", "recorded_at"]);

interface Common {
  agent: string;
  event_id?: string | null;
  run_id?: string | null;
  step_id?: string | null;
  attempt_id?: string | null;
  parents?: string[];
}
export interface Message extends Common {
  type: "message";
  body: string;
}
export interface ToolCall extends Common {
  type: "tool_call";
  tool: string;
  args?: Record<string, unknown>;
  attempt_id: string;
  /** The logical call's key, the same for every attempt at it (model/keys.ts). */
  idempotency_key?: string | null;
}
export interface ToolResult extends Common {
  type: "tool_result";
  tool: string;
  attempt_id: string;
  status: "ok" | "error";
  result?: unknown;
  /** Set when a reconciler's probe found how the call ended: the probe, its evidence, when, by whom. */
  settled_by?: Record<string, unknown> | null;
}
export interface Mutation extends Common {
  type: "mutation";
  kind: string;
  [field: string]: unknown;
}
/** An event as an append takes it. */
export type Event = Message | ToolCall | ToolResult | Mutation;
/** An event's fields as recorded: what was given, defaults left out, event_id filled in. */
export type Fields = Record<string, unknown>;

// Ids, agent and tool names: no control characters (C0, DEL, C1), so they print on one line and
// stores can join them with a control character in their attempt bookkeeping.
const IDENT = /^[^\x00-\x1f\x7f-\x9f]+$/;

type Check = (value: unknown) => string | null; // the fault, or null

const str: Check = (v) => (typeof v === "string" ? null : "Input should be a valid string");
const ident: Check = (v) =>
  typeof v !== "string"
    ? "Input should be a valid string"
    : v.length === 0
      ? "String should have at least 1 character"
      : IDENT.test(v)
        ? null
        : "must not contain control characters";
const optionalIdent: Check = (v) => (v === null ? null : ident(v));
const nonEmpty: Check = (v) =>
  typeof v !== "string"
    ? "Input should be a valid string"
    : v.length === 0
      ? "String should have at least 1 character"
      : null;
const anything: Check = () => null;
const object: Check = (v) => (isPlainObject(v) ? null : "Input should be a valid dictionary");
const optionalObject: Check = (v) => (v === null ? null : object(v));
const status: Check = (v) => (v === "ok" || v === "error" ? null : "Input should be 'ok' or 'error'");

interface FieldSpec {
  check: Check;
  required: boolean;
}

const COMMON: Record<string, FieldSpec> = {
  agent: { check: ident, required: true },
  event_id: { check: optionalIdent, required: false },
  run_id: { check: optionalIdent, required: false },
  step_id: { check: optionalIdent, required: false },
  attempt_id: { check: optionalIdent, required: false },
  parents: { check: () => null, required: false }, // a list of idents: checked below, by item
};

const SCHEMAS: Record<EventType, Record<string, FieldSpec>> = {
  message: { ...COMMON, body: { check: str, required: true } },
  tool_call: {
    ...COMMON,
    tool: { check: ident, required: true },
    args: { check: object, required: false },
    attempt_id: { check: ident, required: true },
    idempotency_key: { check: optionalIdent, required: false },
  },
  tool_result: {
    ...COMMON,
    tool: { check: ident, required: true },
    attempt_id: { check: ident, required: true },
    status: { check: status, required: true },
    result: { check: anything, required: false },
    settled_by: { check: optionalObject, required: false },
  },
  mutation: { ...COMMON, kind: { check: nonEmpty, required: true } },
};

/**
 * Fields whose default value is left out of an event's canonical form (spec: "Canonical
 * content"): the common fields on every type, `args` and `result` only on the types that define
 * them. A mutation's own fields are its data and are kept whatever their value.
 */
const COMMON_DEFAULTS: [string, unknown][] = [
  ["event_id", null],
  ["run_id", null],
  ["step_id", null],
  ["attempt_id", null],
  ["parents", []],
];
const DEFAULTS: Record<EventType, [string, unknown][]> = {
  message: COMMON_DEFAULTS,
  tool_call: [...COMMON_DEFAULTS, ["args", {}], ["idempotency_key", null]],
  tool_result: [...COMMON_DEFAULTS, ["result", null], ["settled_by", null]],
  mutation: COMMON_DEFAULTS,
};

// Made once: an append of a hundred events checks a hundred against them.
const FIELD_LISTS = Object.fromEntries(
  EVENT_TYPES.map((kind) => [kind, Object.entries(SCHEMAS[kind])]),
) as Record<EventType, [string, FieldSpec][]>;
const DEFAULT_MAPS = Object.fromEntries(
  EVENT_TYPES.map((kind) => [kind, new Map(DEFAULTS[kind])]),
) as Record<EventType, Map<string, unknown>>;
const RESERVED_SORTED = [...RESERVED_FIELDS].sort();

function isDefault(value: unknown, fallback: unknown): boolean {
  if (fallback === null) return value === null;
  if (Array.isArray(fallback)) return Array.isArray(value) && value.length === 0;
  return isPlainObject(value) && Object.keys(value).length === 0;
}

function checkParents(value: unknown, index: number): void {
  if (!Array.isArray(value)) {
    throw new InvalidEvent("Input should be a valid list", { index, field: "parents" });
  }
  value.forEach((item, at) => {
    const fault = ident(item);
    if (fault) throw new InvalidEvent(fault, { index, field: `parents.${at}` });
  });
}

/**
 * The event's fields as given, `type` first, defaults left out, once checked against the
 * vocabulary; InvalidEvent naming the event (`index`) and the field at fault.
 */
export function givenFields(raw: unknown, index: number): Fields {
  if (!isPlainObject(raw)) {
    const kind = raw === null ? "null" : Array.isArray(raw) ? "array" : typeof raw;
    throw new InvalidEvent(`expected an event object, got ${kind}`, { index });
  }
  const type = raw["type"];
  if (typeof type !== "string" || !(EVENT_TYPES as readonly string[]).includes(type)) {
    throw new InvalidEvent(
      `unknown event type ${quoted(type)}; the vocabulary is ${EVENT_TYPES.join(", ")}`,
      { index, field: "type" },
    );
  }
  const kind = type as EventType;
  const schema = SCHEMAS[kind];
  if (kind === "mutation") {
    for (const name of RESERVED_SORTED) {
      if (name in raw) {
        throw new InvalidEvent("set by the ledger itself; a mutation may not carry it", {
          index,
          field: name,
        });
      }
    }
  }
  for (const [name, spec] of FIELD_LISTS[kind]) {
    if (!(name in raw) || raw[name] === undefined) {
      if (spec.required) {
        throw new InvalidEvent("required field is missing", { index, field: name });
      }
      continue;
    }
    const fault = spec.check(raw[name]);
    if (fault) throw new InvalidEvent(fault, { index, field: name });
    if (name === "parents") checkParents(raw[name], index);
  }
  const defaults = DEFAULT_MAPS[kind];
  const kept: [string, unknown][] = [];
  for (const [name, value] of Object.entries(raw)) {
    if (value === undefined) continue;
    if (!(name in schema) && name !== "type" && kind !== "mutation") {
      throw new InvalidEvent(`${kind} events have no such field`, { index, field: name });
    }
    // A field given with its default value is not part of the event's canonical form.
    if (defaults.has(name) && isDefault(value, defaults.get(name))) continue;
    kept.push([name, value]);
  }
  // In RFC 8785's order already, so that the canonical form is written without reordering.
  kept.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(kept);
}
