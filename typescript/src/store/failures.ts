/**
 * What a Redis failure means, as the Python package judges it (ledger_bus/store/redis/
 * connection.py): a reply that will not change by retrying it as it is becomes a ledger error
 * at once; a lost connection or a "not now" reply is tried again until the store's timeout.
 */

import { BackendRefused, BackendUnavailable, LedgerError } from "../model/errors.js";

// Replies that mean "not now" rather than "never": a failover, a loading replica, a busy script.
const TRANSIENT = ["LOADING", "BUSY", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"];

/** A reply error of the server (ioredis's ReplyError), as opposed to a failure to get one. */
export function isReply(err: unknown): err is Error {
  return err instanceof Error && err.name === "ReplyError";
}

/** The ledger error for a reply that retrying will not change. */
export function refusal(err: Error): LedgerError {
  const text = err.message;
  if (text.startsWith("WRONGPASS") || text.startsWith("NOAUTH")) {
    return new BackendRefused(`redis refused the credentials: ${text}`);
  }
  if (
    text.startsWith("NOPERM") ||
    text.includes("can't run this command") ||
    text.includes("can't access at least one of the keys")
  ) {
    return new BackendRefused(`redis refused the permission (ACL): ${text}`);
  }
  if (text.startsWith("OOM") || text.includes("used memory > 'maxmemory'")) {
    return new BackendRefused(`Redis memory is full (maxmemory reached): ${text}`);
  }
  return new BackendRefused(`redis refused the command: ${text}`);
}

/** null for a failure worth trying again; the ledger error for one that is final. */
export function final(err: unknown): LedgerError | null {
  if (err instanceof LedgerError) return err;
  if (!isReply(err)) return null; // a lost connection, a timeout, a node gone
  if (TRANSIENT.some((word) => err.message.startsWith(word))) return null;
  return refusal(err);
}

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/**
 * `make()` tried until it returns or `timeoutMs` have passed (then BackendUnavailable), pausing
 * with backoff between tries. Each try is a fresh call: an append retried is the same append_id
 * with the same content, which the script deduplicates.
 */
export async function retried<T>(make: () => Promise<T>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let delay = 20;
  for (;;) {
    try {
      return await make();
    } catch (err) {
      const verdict = final(err);
      if (verdict !== null) throw verdict;
      if (Date.now() + delay > deadline) {
        const why = err instanceof Error ? err.message : String(err);
        throw new BackendUnavailable(`redis unreachable for ${timeoutMs} ms: ${why}`);
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 500);
    }
  }
}
