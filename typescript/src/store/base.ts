/**
 * The EventStore every backend implements: the log (capabilities.ts), its public methods
 * checking their arguments and preparing appends once, here; each backend supplies the few
 * primitives below them, and the capabilities it adds (Attempts, Groups). The same contract as
 * the Python package's (ledger_bus/store/base.py).
 */

import { ArtifactRef, checkSha, refsIn, resolved } from "../model/artifacts.js";
import { DEFAULT_LIMITS, type Limits, prepareAppend, type PreparedAppend } from "../model/batch.js";
import { InvalidInput, NotFound } from "../model/errors.js";
import { checkFence } from "../model/fences.js";
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
import type { AppendResult, RecordedEvent } from "../model/records.js";
import type {
  AppendOptions,
  Capability,
  IterOptions,
  Log,
  ReadOptions,
  ReadStreamOptions,
  ScanOptions,
  SessionsOptions,
  TailOptions,
  WaitOptions,
} from "./capabilities.js";

export const PAGE = 1000;

function checkLimit(limit: unknown, what = "limit"): number | undefined {
  if (limit === undefined) return undefined;
  if (typeof limit === "number" && Number.isSafeInteger(limit) && limit >= 0) return limit;
  throw new InvalidInput(`${what} must be an int >= 0, got ${quoted(limit)}`);
}

function checkCursor(cursor: string | undefined): void {
  if (cursor !== undefined) parseCursor(cursor);
}

/** The arguments of a lease, checked: what every store with Attempts does first. */
export function checkLease(sessionId: string, name: string): void {
  checkName(sessionId, "session id");
  checkName(name, "lease name");
}

export abstract class EventStore implements Log {
  abstract readonly tier: string;
  /** The log alone, unless a backend says more. */
  readonly capabilities: ReadonlySet<Capability> = new Set<Capability>(["log"]);
  readonly limits: Limits;

  constructor(limits: Partial<Limits> = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
  }

  async append(
    stream: StreamId,
    expectedVersion: ExpectedVersion,
    appendId: string,
    events: readonly unknown[],
    options: AppendOptions = {},
  ): Promise<AppendResult> {
    const ref = checkStream(stream);
    const expected = checkExpectedVersion(expectedVersion);
    checkAppendId(appendId);
    const fence = options.fence === undefined ? undefined : checkFence(options.fence);
    const prepared = prepareAppend(ref.sessionId, ref.name, appendId, events, this.limits);
    return this.appendPrepared(ref, expected, appendId, fence === undefined ? prepared : { ...prepared, fence });
  }

  async readStream(stream: StreamId, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    const ref = checkStream(stream);
    let after = checkLimit(options.after, "after") ?? 0;
    const wanted = checkLimit(options.limit);
    const out: RecordedEvent[] = [];
    while (wanted === undefined || out.length < wanted) {
      const count = wanted === undefined ? PAGE : Math.min(PAGE, wanted - out.length);
      const page = await this.readStreamPage(ref, after, count);
      out.push(...page);
      if (page.length < count) break;
      after = (page[page.length - 1] as RecordedEvent).version;
    }
    return this.resolvedAll(ref.sessionId, out, options);
  }

  async scanSession(sessionId: string, options: ScanOptions = {}): Promise<RecordedEvent[]> {
    checkName(sessionId, "session id");
    checkCursor(options.after);
    const wanted = checkLimit(options.limit);
    const out: RecordedEvent[] = [];
    let cursor = options.after;
    while (wanted === undefined || out.length < wanted) {
      const page = await this.scanPage(sessionId, cursor, PAGE);
      out.push(...(wanted === undefined ? page : page.slice(0, wanted - out.length)));
      if (page.length < PAGE) break;
      cursor = (page[page.length - 1] as RecordedEvent).cursor;
    }
    return this.resolvedAll(sessionId, out, options);
  }

  async *iterSession(sessionId: string, options: IterOptions = {}): AsyncGenerator<RecordedEvent> {
    checkName(sessionId, "session id");
    checkCursor(options.after);
    const page = checkLimit(options.page, "page") ?? PAGE;
    if (!page) throw new InvalidInput("page must be an int >= 1");
    let cursor = options.after;
    for (;;) {
      const batch = await this.scanPage(sessionId, cursor, page);
      yield* await this.resolvedAll(sessionId, batch, options);
      if (batch.length < page) return;
      cursor = (batch[batch.length - 1] as RecordedEvent).cursor;
    }
  }

  /** The session's last `n` events, oldest first, at a cost of O(n) whatever the session's length. */
  async tail(sessionId: string, options: TailOptions = {}): Promise<RecordedEvent[]> {
    checkName(sessionId, "session id");
    const n = checkLimit(options.n, "n") ?? 20;
    checkCursor(options.before);
    if (!n) return [];
    return this.resolvedAll(sessionId, await this.tailPage(sessionId, n, options.before), options);
  }

  /**
   * Events after the cursor `after`, waiting up to `timeoutMs` for the first one. With no
   * `after` only events committed after the call are returned.
   */
  async waitSession(sessionId: string, options: WaitOptions): Promise<RecordedEvent[]> {
    checkName(sessionId, "session id");
    checkCursor(options.after);
    const limit = checkLimit(options.limit) ?? PAGE;
    const found = await this.waitPage(sessionId, options.after, Math.max(0, options.timeoutMs), limit);
    return this.resolvedAll(sessionId, found, {});
  }

  async streamVersion(stream: StreamId): Promise<number> {
    return this.versionOf(checkStream(stream));
  }

  async sessions(options: SessionsOptions = {}): Promise<[string, number][]> {
    return this.sessionList(checkLimit(options.limit));
  }

  async artifact(sessionId: string, sha256: string): Promise<Buffer> {
    checkName(sessionId, "session id");
    const found = await this.artifactBytes(sessionId, checkSha(sha256));
    if (found === undefined) {
      throw new NotFound(`session '${sessionId}' holds no artifact sha256:${sha256}`);
    }
    return found;
  }

  async resolve(event: RecordedEvent): Promise<RecordedEvent> {
    return (await this.resolvedAll(event.stream.sessionId, [event], {}))[0] as RecordedEvent;
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
    expected: number | undefined,
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
    after: string | undefined,
    count: number,
  ): Promise<RecordedEvent[]>;
  protected abstract tailPage(
    sessionId: string,
    n: number,
    before: string | undefined,
  ): Promise<RecordedEvent[]>;
  protected abstract waitPage(
    sessionId: string,
    after: string | undefined,
    timeoutMs: number,
    count: number,
  ): Promise<RecordedEvent[]>;
  protected abstract versionOf(stream: StreamId): Promise<number>;
  protected abstract sessionList(limit: number | undefined): Promise<[string, number][]>;
  /** The artifact's bytes; undefined when the session holds none such. */
  protected abstract artifactBytes(sessionId: string, sha256: string): Promise<Buffer | undefined>;
}
