/**
 * Consumer groups on a session's log held in this process (`memory://`), as a Redis consumer
 * group behaves and as the Python memory store keeps them: a group's last delivered cursor, its
 * pending entries with their consumer, delivery count and time of the last delivery, its
 * consumers and its dead letters. Entry ids are the events' cursors.
 */

import { NotFound } from "../model/errors.js";
import { checkName } from "../model/ids.js";
import type { RecordedEvent } from "../model/records.js";
import { type Delivery, deadLetterOf, type GroupBackend } from "./consumers.js";

interface Pending {
  consumer: string;
  deliveries: number;
  since: number; // when it was last delivered (or kept), ms
}

interface Group {
  lastDelivered: string;
  pending: Map<string, Pending>; // by cursor, in the order delivered
  consumers: Map<string, number>; // name -> when it was last seen, ms
  dead: Record<string, string>[];
}

/** What the groups read of the store they belong to. */
export interface MemoryLog {
  /** The session's events after `after`, oldest first, at most `count`. */
  after(session: string, after: string, count: number): RecordedEvent[];
  /** The session's event at `cursor`, if it is still there. */
  at(session: string, cursor: string): RecordedEvent | undefined;
  /** The newest cursor of the session (CURSOR_ZERO when it has none). */
  newest(session: string): string;
  /** Resolves when something is appended, or after `ms`. */
  changed(ms: number): Promise<void>;
}

export class MemoryGroups implements GroupBackend {
  private readonly groups = new Map<string, Group>(); // "<session>\x1f<group>"

  constructor(private readonly log: MemoryLog) {}

  private check(session: string, group: string, consumer?: string): void {
    checkName(session, "session id");
    checkName(group, "group name");
    if (consumer !== undefined) checkName(consumer, "consumer name");
  }

  private group(session: string, group: string, consumer?: string): Group {
    this.check(session, group, consumer);
    const found = this.groups.get(`${session}\x1f${group}`);
    if (found === undefined) throw new NotFound(`no consumer group '${group}' on session '${session}'`);
    if (consumer !== undefined) found.consumers.set(consumer, Date.now());
    return found;
  }

  /** The entries at `cursors` handed out (again) to `consumer`, counted. */
  private deliver(session: string, found: Group, consumer: string, cursors: string[]): Delivery[] {
    const out: Delivery[] = [];
    for (const cursor of cursors) {
      const event = this.log.at(session, cursor);
      const pending = found.pending.get(cursor);
      if (event === undefined) {
        found.pending.delete(cursor); // deleted from the log: nothing to redo
        continue;
      }
      const deliveries = (pending?.deliveries ?? 0) + 1;
      found.pending.set(cursor, { consumer, deliveries, since: Date.now() });
      out.push({ event, entryId: cursor, deliveries });
    }
    return out;
  }

  async create(session: string, group: string, after?: string): Promise<boolean> {
    this.check(session, group);
    const key = `${session}\x1f${group}`;
    if (this.groups.has(key)) return false;
    this.groups.set(key, {
      lastDelivered: after ?? this.log.newest(session),
      pending: new Map(),
      consumers: new Map(),
      dead: [],
    });
    return true;
  }

  async exists(session: string, group: string): Promise<boolean> {
    this.check(session, group);
    return this.groups.has(`${session}\x1f${group}`);
  }

  async read(session: string, group: string, consumer: string, count: number, blockMs: number): Promise<Delivery[]> {
    const deadline = Date.now() + blockMs;
    for (;;) {
      const found = this.group(session, group, consumer);
      const fresh = this.log.after(session, found.lastDelivered, count);
      const last = fresh[fresh.length - 1];
      if (last !== undefined) {
        found.lastDelivered = last.cursor;
        return this.deliver(session, found, consumer, fresh.map((e) => e.cursor));
      }
      const left = deadline - Date.now();
      if (left <= 0) return [];
      await this.log.changed(left);
    }
  }

  async pending(session: string, group: string, consumer: string, count: number): Promise<Delivery[]> {
    const found = this.group(session, group, consumer);
    const own = [...found.pending].filter(([, p]) => p.consumer === consumer).map(([cursor]) => cursor);
    return this.deliver(session, found, consumer, own.slice(0, count));
  }

  async claim(session: string, group: string, consumer: string, minIdleMs: number, count: number): Promise<Delivery[]> {
    const found = this.group(session, group, consumer);
    const now = Date.now();
    const idle = [...found.pending].filter(([, p]) => now - p.since >= minIdleMs).map(([cursor]) => cursor);
    return this.deliver(session, found, consumer, idle.slice(0, count));
  }

  async keep(session: string, group: string, consumer: string, entryIds: string[]): Promise<void> {
    if (!entryIds.length) return;
    const found = this.group(session, group, consumer);
    for (const cursor of entryIds) {
      const pending = found.pending.get(cursor);
      if (pending !== undefined) found.pending.set(cursor, { ...pending, consumer, since: Date.now() });
    }
  }

  async ack(session: string, group: string, entryIds: string[]): Promise<number> {
    if (!entryIds.length) return 0;
    const found = this.group(session, group);
    return entryIds.filter((cursor) => found.pending.delete(cursor)).length;
  }

  async deadLetter(session: string, group: string, delivery: Delivery, reason: string): Promise<void> {
    const found = this.group(session, group);
    found.dead.push(deadLetterOf(delivery, reason));
    found.pending.delete(delivery.entryId);
  }

  async deadLetters(session: string, group: string): Promise<Record<string, string>[]> {
    this.check(session, group);
    return [...(this.groups.get(`${session}\x1f${group}`)?.dead ?? [])];
  }

  async prune(session: string, group: string, idleMs: number): Promise<string[]> {
    const found = this.group(session, group);
    const holding = new Set([...found.pending.values()].map((p) => p.consumer));
    const now = Date.now();
    const gone = [...found.consumers].filter(([name, seen]) => now - seen >= idleMs && !holding.has(name));
    for (const [name] of gone) found.consumers.delete(name);
    return gone.map(([name]) => name);
  }

  async stats(session: string, group: string): Promise<{ pending: number; lastDelivered: string }> {
    const found = this.group(session, group);
    return { pending: found.pending.size, lastDelivered: found.lastDelivered };
  }
}
