/**
 * The call a tool is running in: `currentCall()`. A tool hands the call's idempotency key to the
 * system it acts on (a payment API's `Idempotency-Key`) so that the attempt after a crash does
 * not act twice. The recorder sets it around the tool in AsyncLocalStorage: every async path
 * the tool starts sees its own call (ledger_bus/agent/current.py).
 */

import { AsyncLocalStorage } from "node:async_hooks";

import { LedgerError } from "./model/errors.js";

/** A recorded call as its tool sees it. */
export interface CurrentCall {
  tool: string;
  sessionId: string;
  runId: string;
  stepId: string;
  attemptId: string;
  /** The same for every attempt at this call, in every process and SDK. */
  idempotencyKey: string;
  args: Record<string, unknown>;
}

/** currentCall() outside a recorded call. */
export class NoCurrentCall extends LedgerError {
  override name = "NoCurrentCall";
}

const storage = new AsyncLocalStorage<CurrentCall>();

/** The recorded call the running tool belongs to; NoCurrentCall outside one. */
export function currentCall(): CurrentCall {
  const call = storage.getStore();
  if (call === undefined) throw new NoCurrentCall("no recorded call is running here: currentCall() is for a tool");
  return call;
}

/** Run `fn` with `call` as the current call. */
export function calling<T>(call: CurrentCall, fn: () => T): T {
  return storage.run(call, fn);
}
