/**
 * Keeping an agent in the conversation: its last-N context, then every new event, at least once
 * (the Python package's ledger_bus/agent/tailer.py, on the same consumer groups).
 *
 * A tailer joins a session through a consumer group on the session log (Redis's own, or the
 * memory store's, which behaves as one). Each new event
 * goes to one consumer of the group; it is acked once the handler returns, and an event a
 * consumer took and never acked (its process died) is taken over by another after
 * `claimIdleMs`. An event that keeps failing moves to the group's dead-letter stream after
 * `maxDeliveries`. Consumers in Python and in Node may share one group.
 */

import { CURSOR_ZERO, cursorMs } from "./model/ids.js";
import { formatTime, type RecordedEvent } from "./model/records.js";
import { type Log, need } from "./store/capabilities.js";
import type { Delivery, GroupBackend } from "./store/consumers.js";

export type { Delivery } from "./store/consumers.js";

export interface TailerOptions {
  /** Events per read. */
  count: number;
  /** How long a read waits for new events. */
  blockMs: number;
  /** Take over events other consumers left unacked this long (none given: never). */
  claimIdleMs?: number;
  /** After this many deliveries an event goes to the dead-letter stream. */
  maxDeliveries: number;
  /** While a handler runs, its events' idle time is reset this often (default: a third of claimIdleMs). */
  keepaliveMs?: number;
  /** Events written by this agent are acked without reaching the handler. */
  skipAgent?: string;
  /** Only these event types reach the handler (none given: all of them); the others are acked. */
  types?: readonly string[];
  /** On join, consumers idle this long and holding nothing are removed. */
  forgetIdleMs: number;
}

export const DEFAULT_TAILER_OPTIONS: Readonly<TailerOptions> = Object.freeze({
  count: 100,
  blockMs: 2000,
  maxDeliveries: 5,
  forgetIdleMs: 3_600_000,
});

export type Handler = (event: RecordedEvent) => unknown;

/** How `Tailer.run` delivers: when it stops, whether it acks, what a handler's error does. */
export interface TailerRunOptions {
  /** Stop once aborted (checked between batches). */
  signal?: AbortSignal;
  /** Stop after this many batches. */
  batches?: number;
  /** Ack each batch's handled events (the default). */
  ack?: boolean;
  /**
   * "leave": a handler that throws leaves its event unacked and the run goes on; the event
   * comes back through takeover or this consumer's next start, until maxDeliveries sends it to
   * the dead letters. "raise": the run stops and the error propagates, after acking what was
   * handled before it.
   */
  errors?: "leave" | "raise";
}

export interface ContextOptions {
  /** The longest a line may be, in characters (200 unless said). */
  width?: number;
}

/** A compact line for a model's context: time, who, what. */
export function contextLine(event: RecordedEvent, options: ContextOptions = {}): string {
  const width = options.width ?? 200;
  const at = formatTime(cursorMs(event.cursor)).slice(11, 19);
  const f = event.fields;
  const what =
    f["type"] === "message"
      ? String(f["body"])
      : f["type"] === "tool_call"
        ? `${String(f["tool"])}(${JSON.stringify(f["args"] ?? {})})`
        : f["type"] === "tool_result"
          ? `${String(f["tool"])} -> ${String(f["status"])}: ${JSON.stringify(f["result"] ?? null)}`
          : String(f["kind"]);
  const line = what.split(/\s+/).join(" ");
  return `${at} ${String(f["agent"])} ${String(f["type"])}: ${line.length <= width ? line : line.slice(0, width - 1) + "…"}`;
}

/** The events as compact lines of text, for a model's context window. */
export function renderContext(events: Iterable<RecordedEvent>, options: ContextOptions = {}): string {
  return [...events].map((event) => contextLine(event, options)).join("\n");
}

export interface WatchOptions {
  /** Stop once aborted (checked between waits). */
  signal?: AbortSignal;
  /** How long one wait lasts, in ms (5000 unless said). */
  blockMs?: number;
}

/**
 * Every event of the session committed after the cursor `after`, as it commits: a reader on
 * its own (no group, nothing acked), for a person watching or read-only credentials. The log
 * is all it needs.
 */
export async function* watch(
  store: Log,
  sessionId: string,
  after: string,
  options: WatchOptions = {},
): AsyncGenerator<RecordedEvent> {
  const { signal, blockMs = 5000 } = options;
  let cursor = after;
  while (!signal?.aborted) {
    const batch = await store.waitSession(sessionId, { after: cursor, timeoutMs: blockMs });
    yield* batch;
    const last = batch[batch.length - 1];
    if (last) cursor = last.cursor;
  }
}

/**
 * One consumer of one group on one session. The store must have consumer groups (the
 * "groups" capability): Unsupported when it has not.
 */
export class Tailer {
  readonly options: TailerOptions;
  private readonly groups: GroupBackend;
  private recovered = false;

  constructor(
    readonly store: Log,
    readonly sessionId: string,
    readonly group: string,
    readonly consumer: string,
    options: Partial<TailerOptions> = {},
  ) {
    this.groups = need(store, "groups").groups;
    this.options = { ...DEFAULT_TAILER_OPTIONS, ...options };
  }

  /** The session's last n events, oldest first; O(n) whatever the session's length. */
  async context(n = 20): Promise<RecordedEvent[]> {
    return this.store.tail(this.sessionId, { n });
  }

  /**
   * The last-n context, the group made sure of: a new group starts right after the context
   * returned, so nothing committed in between is missed; an existing group keeps its place.
   */
  async join(n = 20): Promise<RecordedEvent[]> {
    const events = await this.context(n);
    if (await this.groups.exists(this.sessionId, this.group)) {
      await this.groups.prune(this.sessionId, this.group, this.options.forgetIdleMs);
    } else {
      let newest: string;
      const last = events[events.length - 1];
      if (last) newest = last.cursor;
      else if (n) newest = CURSOR_ZERO; // the session was empty: whatever it holds by now is new
      else newest = (await this.store.tail(this.sessionId, { n: 1 }))[0]?.cursor ?? CURSOR_ZERO;
      await this.groups.create(this.sessionId, this.group, newest);
    }
    return events;
  }

  private wanted(event: RecordedEvent): boolean {
    const { skipAgent, types } = this.options;
    if (skipAgent !== undefined && event.fields["agent"] === skipAgent) return false;
    return types === undefined || types.includes(String(event.fields["type"]));
  }

  /** Dead-letter the exhausted, ack the unwanted; what the handler should see. */
  private async sort(found: Delivery[]): Promise<Delivery[]> {
    const keep: Delivery[] = [];
    const skipped: string[] = [];
    for (const delivery of found) {
      if (delivery.deliveries > this.options.maxDeliveries) {
        const reason = `not acked after ${delivery.deliveries - 1} deliveries`;
        await this.groups.deadLetter(this.sessionId, this.group, delivery, reason);
      } else if (this.wanted(delivery.event)) {
        keep.push(delivery);
      } else {
        skipped.push(delivery.entryId);
      }
    }
    await this.groups.ack(this.sessionId, this.group, skipped);
    return keep;
  }

  /**
   * One batch: first this consumer's own unacked events (after a start, or after a read that
   * failed), then events taken over from idle consumers, else new events, waiting up to
   * blockMs for them.
   */
  async poll(): Promise<Delivery[]> {
    const { sessionId: session, group, consumer } = this;
    const { count, claimIdleMs, blockMs } = this.options;
    try {
      if (!this.recovered) {
        await this.join(0);
        const own = await this.groups.pending(session, group, consumer, count);
        this.recovered = true;
        if (own.length) return await this.sort(own);
      }
      if (claimIdleMs !== undefined) {
        const taken = await this.groups.claim(session, group, consumer, claimIdleMs, count);
        if (taken.length) return await this.sort(taken);
      }
      return await this.sort(await this.groups.read(session, group, consumer, count, blockMs));
    } catch (err) {
      // A read that failed may have delivered events to this consumer on the server; only a
      // read of its own pending events finds them again.
      this.recovered = false;
      throw err;
    }
  }

  async ack(deliveries: Iterable<Delivery>): Promise<number> {
    return this.groups.ack(this.sessionId, this.group, [...deliveries].map((d) => d.entryId));
  }

  /** Deliver events to `handler` until aborted (or after `batches` batches). */
  async run(handler: Handler, options: TailerRunOptions = {}): Promise<void> {
    const { signal, batches, ack = true, errors = "leave" } = options;
    let done = 0;
    while (!signal?.aborted && (batches === undefined || done < batches)) {
      const batch = await this.poll();
      const handled: Delivery[] = [];
      const stopKeeping = this.keeping(batch.map((d) => d.entryId));
      try {
        for (const delivery of batch) {
          try {
            await handler(delivery.event);
          } catch (err) {
            if (errors === "raise") throw err;
            continue; // left unacked: it comes back
          }
          handled.push(delivery);
        }
      } finally {
        stopKeeping();
        if (ack) await this.ack(handled);
      }
      done += 1;
    }
  }

  /** Keep the batch's entries fresh while the handler works on them; returns the stop. */
  private keeping(entryIds: string[]): () => void {
    if (!entryIds.length) return () => undefined;
    const every = this.options.keepaliveMs ?? Math.floor((this.options.claimIdleMs ?? 15_000) / 3);
    const timer = setInterval(() => {
      this.groups.keep(this.sessionId, this.group, this.consumer, entryIds).catch(() => undefined);
    }, every);
    return () => { clearInterval(timer); };
  }

  async deadLetters(): Promise<Record<string, string>[]> {
    return this.groups.deadLetters(this.sessionId, this.group);
  }
}
