/**
 * A recorded call: the events that say it was asked for and how it ended, the errors a run
 * meets around it, and the guarantees a recorder publishes (ledger_bus/agent/call_events.py).
 */

import { LedgerError } from "./model/errors.js";
import type { RecordedEvent } from "./model/records.js";

export type Support = "strict" | "best_effort" | "unsupported";
export const DEFAULT_LEASE_MS = 10_000;
export const ABANDONED = "abandoned by a crash; replayed on resume";
/** The outcome a reconciler's probe records for a call whose effect did not take place: the resumed run calls the tool again, under the same key. */
export const NOT_DONE = "not_done";

/** A call's `tool_call`: committed before the call runs, with the logical call's idempotency key. */
export function requestEvent(tool: string, args: Record<string, unknown>, attemptId: string, stepId: string, key: string): Record<string, unknown> {
  return { type: "tool_call", tool, args, attempt_id: attemptId, step_id: stepId, idempotency_key: key };
}

/** A call's `tool_result`: its outcome, "ok" or "error". */
export function resultEvent(tool: string, attemptId: string, stepId: string, status: "ok" | "error", value: unknown): Record<string, unknown> {
  return { type: "tool_result", tool, attempt_id: attemptId, step_id: stepId, status, result: value ?? null };
}

/** The `tool_result` that closes an attempt a crash left unfinished, before a tool safe to replay runs again. */
export function abandonedEvent(call: RecordedEvent, stepId: string): Record<string, unknown> {
  return resultEvent(String(call.fields["tool"]), String(call.fields["attempt_id"]), stepId, "error", {
    outcome: "unknown",
    reason: ABANDONED,
  });
}

/** Whether a tool_result only closes an attempt a crash left unfinished. */
export function isAbandoned(result: RecordedEvent): boolean {
  const value = result.fields["result"] as Record<string, unknown> | null | undefined;
  return typeof value === "object" && value !== null && value["outcome"] === "unknown" && value["reason"] === ABANDONED && Object.keys(value).length === 2;
}

/** Whether a tool_result is a probe's finding that the call's effect did not take place: the step runs again, under the same key. */
export function isNotDone(result: RecordedEvent | undefined): boolean {
  if (result === undefined) return false;
  const by = result.fields["settled_by"];
  if (typeof by !== "object" || by === null || Object.keys(by).length === 0) return false;
  const value = result.fields["result"] as Record<string, unknown> | null | undefined;
  return typeof value === "object" && value !== null && value["outcome"] === NOT_DONE;
}

/** What a tool_result with status "error" records of the exception. */
export function failure(err: unknown): { error: string; message: string } {
  return err instanceof Error ? { error: err.name, message: err.message } : { error: "Error", message: String(err) };
}

/** A call's request could not be committed; the call did not run. */
export class RequestNotRecorded extends LedgerError {
  override name = "RequestNotRecorded";
}

/** A call ran but its result could not be committed; the attempt stays open. */
export class OutcomeNotRecorded extends LedgerError {
  override name = "OutcomeNotRecorded";
}

/** On resume, a call that was requested and never finished, and is unsafe to replay. */
export class UnresolvedAttempt extends LedgerError {
  override name = "UnresolvedAttempt";
  constructor(
    readonly attemptId: string,
    readonly tool: string,
  ) {
    super(
      `attempt ${attemptId} of ${tool} was requested and has no result; it is not safe to` +
        " replay, so recovery stops here for a decision (reconcile it, then resume)",
    );
  }
}

/** On resume, a call whose recorded outcome was an error. */
export class ToolFailed extends LedgerError {
  override name = "ToolFailed";
}

/** What a recorder guarantees, in the vocabulary the adapters publish. */
export interface Capabilities {
  profile: string;
  request_before_call: Support;
  record_outcome: Support;
  recovery: Support;
}

/** A delegation in flight: the call that asked for it and the child run that does it. */
export interface Delegation {
  stepId: string;
  attemptId: string;
  childRunId: string;
  callEventId: string;
  agent: string;
}

/** A call whose request is committed: what its result is recorded against. */
export interface Attempt {
  tool: string;
  attemptId: string;
  stepId: string;
  callId: string;
  /** The logical call's key (currentCall().idempotencyKey while the tool runs). */
  idempotencyKey?: string;
  args?: Record<string, unknown>;
}
