/**
 * What a store can do, in small parts, as the Python contract names them: every store keeps a
 * `Log`; a store may add `Attempts` (leases, open attempts) and `Groups` (consumer groups).
 * A store says which it has in `capabilities`, and a caller asks for what it needs with
 * `need()`, so that a store without it is refused in one line, before anything is done.
 *
 * The Python contract has more (bounds, deletion, restore, safe-to-replay queries, session
 * existence); this SDK has none of them, so they are not named here.
 */

import { Unsupported } from "../model/errors.js";
import type { Fence } from "../model/fences.js";
import type { ExpectedVersion, StreamId } from "../model/ids.js";
import type { AppendResult, OpenAttempt, RecordedEvent } from "../model/records.js";
import type { GroupBackend } from "./consumers.js";

export type LeaseStep = "acquire" | "renew" | "release";

export interface AppendOptions {
  /**
   * The lease the append is made under (the token `lease("acquire", ...)` returned): once that
   * holding is over (the lease expired, or another owner took it), the append is refused with
   * LeaseLost and writes nothing. After the appendId check: a retry of an append already
   * recorded still returns its result.
   */
  fence?: Fence;
}

export interface ReadOptions {
  /** Put fields kept as artifacts back into their events (the default), or leave references. */
  resolveArtifacts?: boolean;
}

export interface ReadStreamOptions extends ReadOptions {
  /** Only versions above this one (0, the default: from the first). */
  after?: number;
  /** At most this many events (none given: all of them). */
  limit?: number;
}

export interface ScanOptions extends ReadOptions {
  /** Only events committed after this cursor (none given: from the start). */
  after?: string;
  /** At most this many events (none given: all of them). */
  limit?: number;
}

export interface IterOptions extends ReadOptions {
  /** Only events committed after this cursor (none given: from the start). */
  after?: string;
  /** Events read a round trip (PAGE unless said). */
  page?: number;
}

export interface TailOptions extends ReadOptions {
  /** How many of the newest events (20 unless said). */
  n?: number;
  /** Only events committed before this cursor (none given: up to the newest). */
  before?: string;
}

export interface WaitOptions {
  /** Only events committed after this cursor (none given: only those committed after the call). */
  after?: string;
  /** How long to wait for the first event, in ms. */
  timeoutMs: number;
  /** At most this many events (PAGE unless said). */
  limit?: number;
}

export interface SessionsOptions {
  /** At most this many sessions (none given: all of them). */
  limit?: number;
}

/** What every store says of itself: its kind, and which capabilities it has. */
export interface Declared {
  /** What kind of store, as logs, metrics and refusals name it. */
  readonly tier: string;
  readonly capabilities: ReadonlySet<Capability>;
}

/** The log every store keeps: appends, reads, waits, artifacts read back. */
export interface Log extends Declared {
  /**
   * Append `events` to `stream` if its version is `expectedVersion` (or ANY): all of them or
   * none, with consecutive versions. A retry with the same `appendId` and the same content
   * returns the original result, `deduplicated`; other content is IdempotencyConflict. Made
   * under `options.fence`, it is refused with LeaseLost once that lease's holding is over.
   */
  append(
    stream: StreamId,
    expectedVersion: ExpectedVersion,
    appendId: string,
    events: readonly unknown[],
    options?: AppendOptions,
  ): Promise<AppendResult>;
  /** A stream's events with versions above `after`, ascending. */
  readStream(stream: StreamId, options?: ReadStreamOptions): Promise<RecordedEvent[]>;
  /** A session's events after the cursor `after` (from the start when none), in commit order. */
  scanSession(sessionId: string, options?: ScanOptions): Promise<RecordedEvent[]>;
  /** The session's events after the cursor `after`, a page at a time, in commit order. */
  iterSession(sessionId: string, options?: IterOptions): AsyncGenerator<RecordedEvent>;
  /** The session's last `n` events (before the cursor `before`, when given), oldest first. */
  tail(sessionId: string, options?: TailOptions): Promise<RecordedEvent[]>;
  /** Events after the cursor `after`, waiting up to `timeoutMs` for the first one. */
  waitSession(sessionId: string, options: WaitOptions): Promise<RecordedEvent[]>;
  /** The stream's version: the number of events appended to it (0 for none). */
  streamVersion(stream: StreamId): Promise<number>;
  /** Sessions by last activity, newest first: [session id, last append in ms]. */
  sessions(options?: SessionsOptions): Promise<[string, number][]>;
  /** The bytes of one of the session's artifacts, by its sha256. NotFound: none such. */
  artifact(sessionId: string, sha256: string): Promise<Buffer>;
  /** An event with each of its artifact references replaced by its value. */
  resolve(event: RecordedEvent): Promise<RecordedEvent>;
  close(): Promise<void>;
}

/** Runs' leases and the calls requested with no outcome yet: what a Recorder needs besides the log. */
export interface Attempts {
  /**
   * A lease (`name`: a run's, an adapter's session), held by one owner and expiring unless
   * renewed, and fenced. "acquire" and "renew" return the holding's token (>= 1) when `owner`
   * holds it afterwards: a new holding draws a greater token than any before it, the same
   * owner acquiring again while it holds keeps its token; appends made under the lease name it
   * in their fence. "release" returns 1 when `owner` let it go. 0 when another owner holds it
   * or, for "renew" and "release", when it is gone (expired: that holding is over for good).
   */
  lease(step: LeaseStep, sessionId: string, name: string, owner: string, ttlMs: number): Promise<number>;
  /** The session's requested calls with no terminal event yet. */
  openAttempts(sessionId: string): Promise<OpenAttempt[]>;
}

/** Consumer groups on a session's log: what a Tailer needs besides the log. */
export interface Groups {
  readonly groups: GroupBackend;
}

/** Each capability by the name a store declares it under. */
export interface CapabilityOf {
  log: Log;
  attempts: Attempts;
  groups: Groups;
}

export type Capability = keyof CapabilityOf;

/** Each capability as a refusal names it: the Python contract's words (its `what`). */
const NAMED: Readonly<Record<Capability, string>> = {
  log: "log",
  attempts: "leases and open attempts",
  groups: "consumer groups",
};

/** Whether `store` declares `capability`: the store, typed as having it. */
export function has<S extends Declared, C extends Capability>(store: S, capability: C): store is S & CapabilityOf[C] {
  // A store written in JavaScript may declare nothing: it has the log alone, if that.
  const declared = (store as Partial<Declared>).capabilities;
  return declared !== undefined && declared.has(capability);
}

/** The capabilities `store` declares, as a refusal names them, in the contract's order. */
export function capabilitiesOf(store: Declared): string[] {
  return (Object.keys(NAMED) as Capability[]).filter((c) => has(store, c)).map((c) => NAMED[c]);
}

/**
 * `store`, typed as having `capability`; Unsupported, in one line, when it does not declare it
 * (the same line as the Python package's: `this store (custom) has no consumer groups: it has
 * log`).
 */
export function need<S extends Declared, C extends Capability>(store: S, capability: C): S & CapabilityOf[C] {
  if (!has(store, capability)) {
    const kind = (store as Partial<Declared>).tier ?? (store as object).constructor.name;
    const found = capabilitiesOf(store);
    throw new Unsupported(
      `this store (${kind}) has no ${NAMED[capability]}: it has ` +
        (found.length ? found.join(", ") : "none of the contract's capabilities"),
    );
  }
  return store;
}
