/**
 * The idempotency key of a logical call (spec/ledger-v1.md, 7.1): the same for every attempt at
 * one call, whichever process or language makes it, derived from where the call stands in the
 * ledger and never from the attempt or the process (ledger_bus/model/keys.py).
 */

import { createHash } from "node:crypto";

export const KEY_PREFIX = "lb1-";
const DOMAIN = "ledger-bus idempotency key";

/** `lb1-` and the first 32 hex digits of SHA-256 over the domain, session, run, step and incarnation joined by U+001F. */
export function idempotencyKey(sessionId: string, runId: string, stepId: string, incarnation = 1): string {
  const text = [DOMAIN, sessionId, runId, stepId, String(incarnation)].join("\u001f");
  return KEY_PREFIX + createHash("sha256").update(text, "utf8").digest("hex").slice(0, 32);
}
