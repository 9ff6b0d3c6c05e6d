/** The records a store returns: committed events, append results, open attempts. */

import type { Fields } from "./events.js";
import { cursorMs, type StreamId } from "./ids.js";

/** One committed event: its fields as appended, plus where and when it was committed. */
export interface RecordedEvent {
  readonly stream: StreamId;
  readonly version: number;
  readonly cursor: string;
  readonly fields: Fields;
}

/** What an append committed, or had committed before when `deduplicated`. */
export interface AppendResult {
  readonly stream: StreamId;
  readonly firstVersion: number;
  readonly lastVersion: number;
  readonly cursor: string;
  readonly deduplicated: boolean;
  /** What was confirmed beyond the primary's memory, for a durability other than local. */
  readonly durability?: string;
  readonly replicas?: number;
  /** Whether the primary's AOF was fsynced, when durability asked for it. */
  readonly aof?: boolean;
}

/** A requested call with no terminal event yet (spec/ledger-v1.md, "Open attempts"). */
export interface OpenAttempt {
  readonly sessionId: string;
  readonly attemptId: string;
  /** The run that asked for it, when the call named one. */
  readonly runId?: string;
  readonly tool: string;
  readonly stream: string;
  readonly cursor: string;
  /** The cursor of the reconcile.unresolved that flagged it, once one has. */
  readonly flaggedCursor?: string;
}

/** A millisecond timestamp as ISO 8601 UTC, as the ledger's lines show it. */
export function formatTime(ms: number): string {
  return new Date(ms).toISOString();
}

/**
 * The flat JSON object of an event's line, as `ledger-bus read -o jsonl` writes it: ledger keys
 * first (session, stream, version, cursor, type, agent, event_id, recorded_at), then the event's
 * own fields.
 */
export function eventLine(event: RecordedEvent): Record<string, unknown> {
  const fields = event.fields;
  const out: Record<string, unknown> = {
    session: event.stream.sessionId,
    stream: event.stream.name,
    version: event.version,
    cursor: event.cursor,
    type: fields["type"],
    agent: fields["agent"],
    event_id: fields["event_id"],
    recorded_at: formatTime(cursorMs(event.cursor)),
  };
  for (const [name, value] of Object.entries(fields)) {
    if (!(name in out)) out[name] = value;
  }
  return out;
}

export function appendLine(result: AppendResult): Record<string, unknown> {
  const out: Record<string, unknown> = {
    session: result.stream.sessionId,
    stream: result.stream.name,
    first_version: result.firstVersion,
    last_version: result.lastVersion,
    cursor: result.cursor,
    deduplicated: result.deduplicated,
  };
  if (result.durability !== undefined && result.durability !== "local") {
    Object.assign(out, { durability: result.durability, replicas: result.replicas, aof: result.aof ?? null });
  }
  return out;
}
