/**
 * The in-process store (`memory://`): the contract held in this process's memory, for tests and
 * demos. It keeps payloads as Redis does (msgpack, decoded on each read), so that what a read
 * returns is never the caller's own object.
 */

import { unpack } from "../model/artifacts.js";
import type { Limits, PreparedAppend } from "../model/batch.js";
import { IdempotencyConflict, VersionConflict } from "../model/errors.js";
import { leaseLost } from "../model/fences.js";
import { checkName, CURSOR_ZERO, cursorsAfter, formatCursor, parseCursor, type StreamId, streamText } from "../model/ids.js";
import type { AppendResult, OpenAttempt, RecordedEvent } from "../model/records.js";
import { checkLease, EventStore } from "./base.js";
import type { Attempts, Capability, Groups, LeaseStep } from "./capabilities.js";
import { MemoryGroups } from "./memorygroups.js";

interface Entry {
  cursor: string;
  stream: StreamId;
  version: number;
  payload: Buffer;
}

interface Recorded {
  digest: string;
  result: AppendResult;
}

interface Session {
  log: Entry[];
  versions: Map<string, number>;
  appendIds: Map<string, Recorded>; // "<stream>\x1f<append_id>"
  open: Map<string, OpenAttempt>;
  safe: Set<string>;
  artifacts: Map<string, Buffer>;
  lastActive: number;
}

/**
 * Where in a session's log (in cursor order: cursors of one width compare as text) the first
 * entry above `cursor` is, or with `orAt` the first at or above it: a binary search, as the
 * Python memory store's bisect, so a read of what is new costs the same on a long log.
 */
function firstAbove(log: readonly Entry[], cursor: string, orAt = false): number {
  let low = 0;
  let high = log.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    const at = log[middle]?.cursor ?? "";
    if (at < cursor || (!orAt && at === cursor)) low = middle + 1;
    else high = middle;
  }
  return low;
}

export class MemoryStore extends EventStore implements Attempts, Groups {
  readonly tier: string = "memory";
  override readonly capabilities: ReadonlySet<Capability> = new Set<Capability>(["log", "attempts", "groups"]);
  private readonly data = new Map<string, Session>();
  private waiters: (() => void)[] = [];
  private readonly leases = new Map<string, { owner: string; until: number }>();
  // "<session>\x1f<lease name>" -> the token of its current holding, kept when the lease
  // goes, as lease.lua keeps lb:{S}:fences: tokens only grow.
  private readonly fences = new Map<string, number>();
  /** The consumer groups on this store's session logs, for a Tailer. */
  readonly groups: MemoryGroups = new MemoryGroups({
    after: (session, after, count) => {
      const log = this.logOf(session);
      const start = firstAbove(log, after);
      return log.slice(start, start + count).map((e) => this.recorded(e));
    },
    at: (session, cursor) => {
      const log = this.logOf(session);
      const found = log[firstAbove(log, cursor, true)];
      return found?.cursor === cursor ? this.recorded(found) : undefined;
    },
    newest: (session) => this.logOf(session).at(-1)?.cursor ?? CURSOR_ZERO,
    changed: (ms) => this.changed(ms),
  });

  constructor(options: { limits?: Partial<Limits> } = {}) {
    super(options.limits);
  }

  private logOf(session: string): Entry[] {
    return this.data.get(session)?.log ?? [];
  }

  /** Resolves when an append wakes the waiters, or after `ms`. */
  private changed(ms: number): Promise<void> {
    return new Promise<void>((done) => {
      const timer = setTimeout(done, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        done();
      });
    });
  }

  async close(): Promise<void> {
    this.wake();
  }

  private session(id: string): Session {
    let found = this.data.get(id);
    if (found === undefined) {
      found = {
        log: [],
        versions: new Map(),
        appendIds: new Map(),
        open: new Map(),
        safe: new Set(),
        artifacts: new Map(),
        lastActive: 0,
      };
      this.data.set(id, found);
    }
    return found;
  }

  private wake(): void {
    const waiting = this.waiters;
    this.waiters = [];
    for (const wake of waiting) wake();
  }

  protected async appendPrepared(
    stream: StreamId,
    expected: number | undefined,
    appendId: string,
    prepared: PreparedAppend,
  ): Promise<AppendResult> {
    const session = this.session(stream.sessionId);
    const digest = prepared.sha256.toString("hex");
    // First of all, as append.lua: a writer whose holding is over is told so whatever it sends.
    const fence = prepared.fence;
    if (fence !== undefined) {
      const key = `${stream.sessionId}\x1f${fence.lease}`;
      const token = this.fences.get(key) ?? 0;
      if (token !== fence.token || this.holder(key) !== fence.owner) throw leaseLost(fence, token);
    }
    const prior = session.appendIds.get(`${stream.name}\x1f${appendId}`);
    if (prior !== undefined) {
      if (prior.digest !== digest) throw new IdempotencyConflict(streamText(stream), appendId);
      return { ...prior.result, deduplicated: true };
    }
    const version = session.versions.get(stream.name) ?? 0;
    if (expected !== undefined && expected !== version) {
      throw new VersionConflict(streamText(stream), expected, version);
    }
    const last = session.log.length ? (session.log[session.log.length - 1] as Entry).cursor : CURSOR_ZERO;
    const cursors = cursorsAfter(last, Date.now(), prepared.payloads.length);
    prepared.payloads.forEach((payload, at) => {
      const cursor = cursors[at] as string;
      session.log.push({ cursor, stream, version: version + at + 1, payload });
      this.note(session, stream, prepared.notes[at] as string, cursor);
    });
    for (const artifact of prepared.artifacts) {
      session.artifacts.set(artifact.ref.sha256, artifact.data);
    }
    session.versions.set(stream.name, version + prepared.payloads.length);
    session.lastActive = Date.now();
    const result: AppendResult = {
      stream,
      firstVersion: version + 1,
      lastVersion: version + prepared.payloads.length,
      cursor: cursors[cursors.length - 1] as string,
      deduplicated: false,
    };
    session.appendIds.set(`${stream.name}\x1f${appendId}`, { digest, result });
    this.wake();
    return result;
  }

  /** What an event's note (model/attempts.ts) does to the session's open attempts. */
  private note(session: Session, stream: StreamId, note: string, cursor: string): void {
    if (!note) return;
    const [kind, first = "", second = "", third = ""] = note.split("\x1f");
    if (kind === "o") {
      session.open.set(first, {
        sessionId: stream.sessionId,
        attemptId: first,
        ...(second ? { runId: second } : {}),
        tool: third,
        stream: stream.name,
        cursor: cursor,
      });
    } else if (kind === "c") {
      session.open.delete(first);
    } else if (kind === "f") {
      const open = session.open.get(first);
      const named = second ? formatCursor(...parseCursor(second)) : undefined;
      if (open && open.flaggedCursor === undefined && (named === undefined || named === open.cursor)) {
        session.open.set(first, { ...open, flaggedCursor: cursor });
      }
    } else if (kind === "s") {
      session.safe.add(`${first}\x1f${second}`);
    }
  }

  private recorded(entry: Entry): RecordedEvent {
    return {
      stream: entry.stream,
      version: entry.version,
      cursor: entry.cursor,
      fields: unpack(entry.payload),
    };
  }

  protected async readStreamPage(
    stream: StreamId,
    after: number,
    count: number,
  ): Promise<RecordedEvent[]> {
    const log = this.data.get(stream.sessionId)?.log ?? [];
    return log
      .filter((e) => e.stream.name === stream.name && e.version > after)
      .slice(0, count)
      .map((e) => this.recorded(e));
  }

  protected async scanPage(
    sessionId: string,
    after: string | undefined,
    count: number,
  ): Promise<RecordedEvent[]> {
    const log = this.data.get(sessionId)?.log ?? [];
    const start = after === undefined ? 0 : firstAbove(log, after);
    return log.slice(start, start + count).map((e) => this.recorded(e));
  }

  protected async tailPage(
    sessionId: string,
    n: number,
    before: string | undefined,
  ): Promise<RecordedEvent[]> {
    const log = this.data.get(sessionId)?.log ?? [];
    const end = before === undefined ? log.length : firstAbove(log, before, true);
    return log.slice(Math.max(0, end - n), end).map((e) => this.recorded(e));
  }

  protected async waitPage(
    sessionId: string,
    after: string | undefined,
    timeoutMs: number,
    count: number,
  ): Promise<RecordedEvent[]> {
    const log = this.data.get(sessionId)?.log ?? [];
    const from = after ?? (log.length ? (log[log.length - 1] as Entry).cursor : CURSOR_ZERO);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = await this.scanPage(sessionId, from, count);
      const left = deadline - Date.now();
      if (found.length || left <= 0) return found;
      await this.changed(left);
    }
  }

  protected async versionOf(stream: StreamId): Promise<number> {
    return this.data.get(stream.sessionId)?.versions.get(stream.name) ?? 0;
  }

  protected async sessionList(limit: number | undefined): Promise<[string, number][]> {
    const found: [string, number][] = [...this.data.entries()].map(([id, s]) => [id, s.lastActive]);
    found.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return limit === undefined ? found : found.slice(0, limit);
  }

  async openAttempts(sessionId: string): Promise<OpenAttempt[]> {
    checkName(sessionId, "session id");
    return [...(this.data.get(sessionId)?.open.values() ?? [])];
  }

  /** Who holds the lease `key` ("<session>\x1f<name>") now; undefined once it expired. */
  private holder(key: string): string | undefined {
    const found = this.leases.get(key);
    return found && found.until > Date.now() ? found.owner : undefined;
  }

  async lease(step: LeaseStep, sessionId: string, name: string, owner: string, ttlMs: number): Promise<number> {
    checkLease(sessionId, name);
    const key = `${sessionId}\x1f${name}`;
    const holder = this.holder(key);
    if (step === "acquire" ? holder !== undefined && holder !== owner : holder !== owner) return 0;
    if (step === "release") {
      this.leases.delete(key);
      return 1;
    }
    // A new holding (the lease free, or expired) draws the next token, as lease.lua does.
    if (holder === undefined) this.fences.set(key, (this.fences.get(key) ?? 0) + 1);
    this.leases.set(key, { owner, until: Date.now() + ttlMs });
    return this.fences.get(key) as number;
  }

  protected async artifactBytes(sessionId: string, sha256: string): Promise<Buffer | undefined> {
    return this.data.get(sessionId)?.artifacts.get(sha256);
  }
}
