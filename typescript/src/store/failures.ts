/**
 * What a Redis failure means, as the Python package judges it (ledger_bus/store/redis/
 * connection.py): a reply that will not change by retrying it as it is becomes a ledger error
 * at once; a lost connection or a "not now" reply is tried again until the store's timeout.
 */

import type { Cluster } from "ioredis";

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

/** undefined for a failure worth trying again; the ledger error for one that is final. */
export function final(err: unknown): LedgerError | undefined {
  if (err instanceof LedgerError) return err;
  if (!isReply(err)) return undefined; // a lost connection, a timeout, a node gone
  if (TRANSIENT.some((word) => err.message.startsWith(word))) return undefined;
  return refusal(err);
}

/**
 * Why a cluster client cannot start, which its calls do not say: while it is not ready they
 * fail with ioredis's "Cluster isn't ready", whatever the nodes answered. This keeps what each
 * node answered when last asked for the slot map, until the cluster is ready.
 */
export class ClusterTrouble {
  private readonly nodes = new Map<string, Error>();

  constructor(private readonly client: Cluster) {
    client.on("node error", (err: unknown, key: unknown) => {
      if (err instanceof Error) this.nodes.set(String(key), err);
    });
    client.on("ready", () => {
      this.nodes.clear();
    });
  }

  private get starting(): boolean {
    return this.client.status !== "ready" && this.nodes.size > 0;
  }

  /** A node's refusal (a wrong password, a user without the rights) while the cluster cannot start. */
  refusal(): LedgerError | undefined {
    // Only what retrying will not change: a node still loading, or a cluster down for a
    // moment, is waited for as any unavailable node is.
    if (!this.starting) return undefined;
    return [...this.nodes.values()].map(final).find((found) => found !== undefined);
  }

  /** What each node answered, for a cluster that could not start; undefined for one that could. */
  describe(): string | undefined {
    if (!this.starting) return undefined;
    const nodes = [...this.nodes].map(([key, err]) => `${key}: ${err.message}`);
    return `no node of the cluster answered (${nodes.join("; ")})`;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/**
 * `make()` tried until it returns or `timeoutMs` have passed (then BackendUnavailable), pausing
 * with backoff between tries. Each try is a fresh call: an append retried is the same appendId
 * with the same content, which the script deduplicates. `trouble`, for a cluster client, says
 * why it could not start: a node's refusal is final, and the nodes' failures are the message.
 */
export async function retried<T>(make: () => Promise<T>, timeoutMs: number, trouble?: ClusterTrouble): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let delay = 20;
  for (;;) {
    try {
      return await make();
    } catch (err) {
      const verdict = final(err) ?? trouble?.refusal();
      if (verdict !== undefined) throw verdict;
      if (Date.now() + delay > deadline) {
        const why = trouble?.describe() ?? (err instanceof Error ? err.message : String(err));
        throw new BackendUnavailable(`redis unreachable for ${timeoutMs} ms: ${why}`);
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 500);
    }
  }
}
