/**
 * The EventStore every backend implements: the public methods check their arguments and
 * prepare appends once, here; each backend supplies the few primitives below them. The same
 * contract as the Python package's (ledger_bus/store/base.py).
 */

import { ArtifactRef, checkSha, refsIn, resolved } from "../model/artifacts.js";
import { DEFAULT_LIMITS, type Limits, prepareAppend, type PreparedAppend } from "../model/batch.js";
import { InvalidInput, NotFound } from "../model/errors.js";
import {
  checkAppendId,
  checkExpectedVersion,
  checkName,
  checkStream,
  type ExpectedVersion,
  parseCursor,
  quoted,
  type StreamId,
} from "../model/ids.js";
import type { AppendResult, OpenAttempt, RecordedEvent } from "../model/records.js";

export const PAGE = 1000;

export type LeaseStep = "acquire" | "renew" | "release";

export interface ReadOptions {
  /** Put fields kept as artifacts back into their events (the default), or leave references. */
  resolveArtifacts?: boolean;
}

function checkLimit(limit: unknown, what = "limit"): number | null {
  if (limit === undefined || limit === null) return null;
  if (typeof limit === "number" && Number.isSafeInteger(limit) && limit >= 0) return limit;
  throw new InvalidInput(`${what} must be an int >= 0 or null, got ${quoted(limit)}`);
}

export abstract class EventStore {
  /** What kind of store, as logs and metrics name it. */
  abstract readonly tier: string;
  readonly limits: Limits;

  constructor(limits: Partial<Limits> = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
  }

  /**
   * Append `events` to `stream` if its version is `expectedVersion` (or ANY): all of them or
   * none, with consecutive versions. A retry with the same `appendId` and the same content
   * returns the original result, `deduplicated`; other content is IdempotencyConflict.
   */
  async append(
    stream: StreamId,
    expectedVersion: ExpectedVersion,
    appendId: string,
    events: readonly unknown[],
  ): Promise<AppendResult> {
    const ref = checkStream(stream);
    const expected = checkExpectedVersion(expectedVersion);
    checkAppendId(appendId);
    const prepared = prepareAppend(ref.sessionId, ref.name, appendId, events, this.limits);
    return this.appendPrepared(ref, expected, appendId, prepared);
  }

  /** A stream's events with versions above `afterVersion`, ascending. */
  async readStream(
    stream: StreamId,
    afterVersion = 0,
    limit: number | null = null,
    options: ReadOptions = {},
  ): Promise<RecordedEvent[]> {
    const ref = checkStream(stream);
    let after = checkExpectedVersion(afterVersion);
    if (after === null) throw new InvalidInput("after_version must be an int >= 0");
    const wanted = checkLimit(limit);
    const out: RecordedEvent[] = [];
    while (wanted === null || out.length < wanted) {
      const count = wanted === null ? PAGE : Math.min(PAGE, wanted - out.length);
      const page = await this.readStreamPage(ref, after, count);
      out.push(...page);
      if (page.length < count) break;
      after = (page[page.length - 1] as RecordedEvent).version;
    }
    return this.resolvedAll(ref.sessionId, out, options);
  }

  /** A session's events after `afterCursor` (from the start when null), in commit order. */
  async scanSession(
    sessionId: string,
    afterCursor: string | null = null,
    limit: number | null = null,
    options: ReadOptions = {},
  ): Promise<RecordedEvent[]> {
    checkName(sessionId, "session id");
    if (afterCursor !== null) parseCursor(afterCursor);
    const wanted = checkLimit(limit);
    const out: RecordedEvent[] = [];
    let cursor = afterCursor;
    while (wanted === null || out.length < wanted) {
      const page = await this.scanPage(sessionId, cursor, PAGE);
      out.push(...(wanted === null ? page : page.slice(0, wanted - out.length)));
      if (page.length < PAGE) break;
      cursor = (page[page.length - 1] as RecordedEvent).cursor;
    }
    return this.resolvedAll(sessionId, out, options);
  }

  /** The session's events after `afterCursor`, a page at a time, in commit order. */
  async *iterSession(
    sessionId: string,
    afterCursor: string | null = null,
    page = PAGE,
    options: ReadOptions = {},
  ): AsyncGenerator<RecordedEvent> {
    checkName(sessionId, "session id");
    if (afterCursor !== null) parseCursor(afterCursor);
    let cursor = afterCursor;
    for (;;) {
      const batch = await this.scanPage(sessionId, cursor, page);
      yield* await this.resolvedAll(sessionId, batch, options);
      if (batch.length < page) return;
      cursor = (batch[batch.length - 1] as RecordedEvent).cursor;
    }
  }

  /**
   * The session's last `n` events (before the cursor `before`, when given), oldest first, at a
   * cost of O(n) whatever the session's length.
   */
  async tail(
    sessionId: string,
    n = 20,
    before: string | null = null,
    options: ReadOptions = {},
  ): Promise<RecordedEvent[]> {
    checkName(sessionId, "session id");
    if (checkLimit(n, "n") === null) throw new InvalidInput("n must be an int >= 0");
    if (before !== null) parseCursor(before);
    if (!n) return [];
    return this.resolvedAll(sessionId, await this.tailPage(sessionId, n, before), options);
  }

  /**
   * Events after `afterCursor`, waiting up to `timeoutMs` for the first one. With
   * `afterCursor` null only events committed after the call are returned.
   */
  async waitSession(
    sessionId: string,
    afterCursor: string | null,
    timeoutMs: number,
    limit = PAGE,
  ): Promise<RecordedEvent[]> {
    checkName(sessionId, "session id");
    if (afterCursor !== null) parseCursor(afterCursor);
    const found = await this.waitPage(sessionId, afterCursor, Math.max(0, timeoutMs), limit);
    return this.resolvedAll(sessionId, found, {});
  }

  /** The stream's version: the number of events appended to it (0 for none). */
  async streamVersion(stream: StreamId): Promise<number> {
    return this.versionOf(checkStream(stream));
  }

  /** Sessions by last activity, newest first: [session id, last append in ms]. */
  async sessions(limit: number | null = null): Promise<[string, number][]> {
    return this.sessionList(checkLimit(limit));
  }

  /** The session's requested calls with no terminal event yet. */
  async openAttempts(sessionId: string): Promise<OpenAttempt[]> {
    checkName(sessionId, "session id");
    return this.openOf(sessionId);
  }

  /** The bytes of one of the session's artifacts, by its sha256. NotFound: none such. */
  async artifact(sessionId: string, sha256: string): Promise<Buffer> {
    checkName(sessionId, "session id");
    const found = await this.artifactBytes(sessionId, checkSha(sha256));
    if (found === null) {
      throw new NotFound(`session '${sessionId}' holds no artifact sha256:${sha256}`);
    }
    return found;
  }

  /** An event with each of its artifact references replaced by its value. */
  async resolve(event: RecordedEvent): Promise<RecordedEvent> {
    return (await this.resolvedAll(event.stream.sessionId, [event], {}))[0] as RecordedEvent;
  }

  /**
   * A run's lease (`name`), held by one owner token and expiring unless renewed: true when
   * `owner` holds it afterwards ("acquire", "renew") or let it go ("release").
   */
  async lease(step: LeaseStep, sessionId: string, name: string, owner: string, ttlMs: number): Promise<boolean> {
    checkName(sessionId, "session id");
    checkName(name, "lease name");
    return this.leaseStep(step, sessionId, name, owner, ttlMs);
  }

  abstract close(): Promise<void>;

  private async resolvedAll(
    sessionId: string,
    events: RecordedEvent[],
    options: ReadOptions,
  ): Promise<RecordedEvent[]> {
    if (options.resolveArtifacts === false) return events;
    const wanted = new Map<string, ArtifactRef>();
    for (const event of events) for (const ref of refsIn(event.fields)) wanted.set(ref.sha256, ref);
    if (!wanted.size) return events;
    const found = new Map<string, Buffer>();
    for (const sha of wanted.keys()) found.set(sha, await this.artifact(sessionId, sha));
    return events.map((event) =>
      refsIn(event.fields).length
        ? { ...event, fields: resolved(event.fields, (ref) => found.get(ref.sha256) as Buffer) }
        : event,
    );
  }

  // -- what each backend supplies ----------------------------------------------------------------

  protected abstract appendPrepared(
    stream: StreamId,
    expected: number | null,
    appendId: string,
    prepared: PreparedAppend,
  ): Promise<AppendResult>;
  protected abstract readStreamPage(
    stream: StreamId,
    after: number,
    count: number,
  ): Promise<RecordedEvent[]>;
  protected abstract scanPage(
    sessionId: string,
    after: string | null,
    count: number,
  ): Promise<RecordedEvent[]>;
  protected abstract tailPage(
    sessionId: string,
    n: number,
    before: string | null,
  ): Promise<RecordedEvent[]>;
  protected abstract waitPage(
    sessionId: string,
    after: string | null,
    timeoutMs: number,
    count: number,
  ): Promise<RecordedEvent[]>;
  protected abstract versionOf(stream: StreamId): Promise<number>;
  protected abstract sessionList(limit: number | null): Promise<[string, number][]>;
  protected abstract openOf(sessionId: string): Promise<OpenAttempt[]>;
  protected abstract artifactBytes(sessionId: string, sha256: string): Promise<Buffer | null>;
  protected abstract leaseStep(
    step: LeaseStep,
    sessionId: string,
    name: string,
    owner: string,
    ttlMs: number,
  ): Promise<boolean>;
}
