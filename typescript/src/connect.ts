/** Open a store from a URL, as the Python package's `ledger_bus.connect` does. */

import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";

import { Cluster, Redis } from "ioredis";

import type { Limits } from "./model/batch.js";
import { DEFAULT_DURABILITY_TIMEOUT_MS, durabilityName, isLocal, parseDurability } from "./model/durability.js";
import { InvalidInput } from "./model/errors.js";
import type { EventStore } from "./store/base.js";
import type { Attempts, Groups } from "./store/capabilities.js";
import { MemoryStore } from "./store/memory.js";
import { RedisStore } from "./store/redis.js";
import { type Node, nodesUrl, shown } from "./store/urls.js";

export interface ConnectOptions {
  /** How long a call is retried through lost connections and failovers before BackendUnavailable, in ms. */
  timeoutMs?: number;
  /** The first part of every Redis key, to share one database between ledgers. */
  prefix?: string;
  /** Bounds on event size and events per append, and the size from which fields become artifacts. */
  limits?: Partial<Limits>;
  /**
   * What an append waits for: "local" (the default), "replicas:N", "aof" or "aof+replicas:N";
   * overrides the URL's `?durability=` (and `&durability_timeout_ms=`).
   */
  durability?: string;
}

/** What `connect` opens: a store with the log, leases and open attempts, and consumer groups. */
export type ConnectedStore = EventStore & Attempts & Groups;

const SCHEMES = "use redis://, rediss://, redis+cluster://, rediss+cluster:// or memory://";

/**
 * Open a store: "redis://host:port/db", "rediss://..." (TLS),
 * "redis+cluster://[user:pass@]host:port,host2:port2/0" (seeds of a Redis Cluster: the client
 * starts from any of them that answers; the credentials and TLS are every node's) or
 * "memory://"; none given reads LEDGER_BUS_URL, then falls back to redis://127.0.0.1:6379/0.
 */
export function connect(url?: string, options: ConnectOptions = {}): ConnectedStore {
  const given = url ?? process.env["LEDGER_BUS_URL"] ?? "redis://127.0.0.1:6379/0";
  const cluster = /^rediss?\+cluster:/i.test(given);
  let parsed: URL;
  let seeds: Node[] = [];
  if (cluster) {
    ({ url: parsed, nodes: seeds } = nodesUrl(given, "a cluster seed"));
  } else {
    try {
      parsed = new URL(given);
    } catch {
      throw new InvalidInput(`unsupported URL '${shown(given)}': ${SCHEMES}`);
    }
  }
  const scheme = parsed.protocol.replace(/:$/, "");
  const query = parsed.searchParams;
  const waitMs = query.get("durability_timeout_ms") ?? String(DEFAULT_DURABILITY_TIMEOUT_MS);
  if (!/^[0-9]+$/.test(waitMs)) throw new InvalidInput(`durability_timeout_ms must be milliseconds: '${shown(given)}'`);
  const durability = parseDurability(options.durability ?? query.get("durability") ?? "local", Number(waitMs));
  query.delete("durability");
  query.delete("durability_timeout_ms");
  const tls = scheme.startsWith("rediss") ? tlsOptions(query) : undefined;
  const address = parsed.toString();
  const timeoutMs = options.timeoutMs ?? 10_000;
  if (timeoutMs <= 0 || !Number.isFinite(timeoutMs)) {
    throw new InvalidInput(`timeoutMs must be a positive number, got ${timeoutMs}`);
  }
  if (scheme === "memory") {
    if (!isLocal(durability)) {
      throw new InvalidInput(`memory:// keeps nothing beyond this process: durability ${durabilityName(durability)}`);
    }
    return new MemoryStore({ limits: options.limits });
  }
  const common = {
    // A call that fails is tried again by the store (store/failures.ts) until its timeout, the
    // same append_id with it; the client's own retries would only hide the failure from it.
    maxRetriesPerRequest: 1,
    connectTimeout: Math.min(timeoutMs, 10_000),
    retryStrategy: (times: number) => Math.min(times * 50, 500),
  };
  const store = { prefix: options.prefix, timeoutMs, limits: options.limits, durability };
  if (scheme === "redis" || scheme === "rediss") {
    const client = new Redis(address, { ...common, ...(tls ? { tls } : {}) });
    client.on("error", () => undefined); // failures reach the calls, which judge them
    return new RedisStore(client, store);
  }
  if (cluster) {
    if (!["", "/", "/0"].includes(parsed.pathname)) {
      throw new InvalidInput(`a Redis Cluster has database 0 only: '${shown(given)}'`);
    }
    // ioredis asks the seeds for the slot map one after another (in a shuffled order) until one
    // answers, so a URL outlives any of its seeds being down.
    const client = new Cluster(seeds, {
      redisOptions: {
        ...common,
        username: decoded(parsed.username, given) || undefined,
        password: decoded(parsed.password, given) || undefined,
        tls,
      },
      clusterRetryStrategy: (times: number) => Math.min(times * 100, 1000),
      // A call made while no node answers fails at once, and the store tries it again until
      // its timeout (store/failures.ts); queued, it would wait as long as the cluster is
      // unreachable, past any timeout.
      enableOfflineQueue: false,
    });
    client.on("error", () => undefined);
    return new RedisStore(client, store);
  }
  throw new InvalidInput(`unsupported URL '${shown(given)}': ${SCHEMES}`);
}

/** A URL's user or password as written, percent-decoded; a broken %-escape is bad input. */
function decoded(part: string, given: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new InvalidInput(`a malformed %-escape in the credentials of '${shown(given)}'`);
  }
}

/**
 * TLS settings from a rediss:// URL's query, as the Python package reads them:
 * `ssl_ca_certs` (the CA that signed the server's certificate, besides the system's),
 * `ssl_certfile` and `ssl_keyfile` (a client certificate, for a server that asks for one).
 * The parameters are taken out of the URL; a file that cannot be read is bad input.
 */
function tlsOptions(query: URLSearchParams): ConnectionOptions {
  const read = (name: string): Buffer | undefined => {
    const path = query.get(name);
    query.delete(name);
    if (path === null) return undefined;
    try {
      return readFileSync(path);
    } catch (err) {
      throw new InvalidInput(`${name}: cannot read ${path}: ${(err as Error).message}`);
    }
  };
  const ca = read("ssl_ca_certs");
  const cert = read("ssl_certfile");
  const key = read("ssl_keyfile");
  return { ...(ca ? { ca } : {}), ...(cert ? { cert } : {}), ...(key ? { key } : {}) };
}
