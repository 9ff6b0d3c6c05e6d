/**
 * Consumer groups on a session's log (Redis), as the Python store keeps them
 * (ledger_bus/store/redis/groups.py): a Redis consumer group on `lb:{S}:log`, delivery counts
 * from the pending list, a dead-letter stream `lb:{S}:dead:<group>` per group. A group made by
 * either SDK is read by the other.
 */

import { NotFound, BackendRefused } from "../model/errors.js";
import { checkName, ledgerCursor, redisCursor } from "../model/ids.js";
import type { RecordedEvent } from "../model/records.js";
import type { RedisStore } from "./redis.js";
import { type Delivery, deadLetterOf, type GroupBackend } from "./consumers.js";
import { type Entry, pruneConsumersReply, text } from "./replies.js";
import { script } from "./scripts.js";

export type { Delivery, GroupBackend } from "./consumers.js";

const PRUNE_CONSUMERS = script("prune_consumers");

/** The consumer groups of a RedisStore (its `groups`). */
export class RedisGroups implements GroupBackend {
  constructor(private readonly store: RedisStore) {}

  private log(session: string): string {
    return this.store.keys.log(session);
  }

  private check(session: string, group: string, consumer?: string): void {
    checkName(session, "session id");
    checkName(group, "group name");
    if (consumer !== undefined) checkName(consumer, "consumer name");
  }

  /** A retried call, a refusal because the group does not exist becoming NotFound. */
  private async call<T>(session: string, group: string, make: () => Promise<T>): Promise<T> {
    try {
      return await this.store.run(make);
    } catch (err) {
      if (err instanceof BackendRefused && !(await this.exists(session, group))) {
        throw new NotFound(`no consumer group '${group}' on session '${session}'`);
      }
      throw err;
    }
  }

  /** Make the group, reading after the cursor `after` (none: after what is there now); false if it was there. */
  async create(session: string, group: string, after?: string): Promise<boolean> {
    this.check(session, group);
    const start = after === undefined ? "$" : redisCursor(after);
    try {
      await this.store.run(() => this.store.client.xgroup("CREATE", this.log(session), group, start, "MKSTREAM"));
    } catch (err) {
      if (err instanceof BackendRefused && err.message.includes("BUSYGROUP")) return false;
      throw err;
    }
    return true;
  }

  async exists(session: string, group: string): Promise<boolean> {
    this.check(session, group);
    const found = await this.store.run(async () => {
      try {
        return (await this.store.client.xinfo("GROUPS", this.log(session))) as unknown[][];
      } catch (err) {
        if (err instanceof Error && err.name === "ReplyError" && /no such key/i.test(err.message)) return [];
        throw err;
      }
    });
    return found.some((info) => info[info.indexOf("name") + 1] === group);
  }

  private async deliveries(session: string, group: string, entries: Entry[], counted: boolean): Promise<Delivery[]> {
    const events = this.store.records(session, entries);
    const counts = counted ? await this.counts(session, group, entries.map(([id]) => text(id))) : new Map<string, number>();
    return entries.map(([id], at) => ({
      event: events[at] as RecordedEvent,
      entryId: text(id),
      deliveries: counts.get(text(id)) ?? 1,
    }));
  }

  private async counts(session: string, group: string, ids: string[]): Promise<Map<string, number>> {
    const log = this.log(session);
    const found = await this.call(session, group, () =>
      Promise.all(ids.map((id) => this.store.client.xpending(log, group, id, id, 1) as Promise<unknown[][]>)),
    );
    const counts = new Map<string, number>();
    for (const items of found) for (const item of items) counts.set(String(item[0]), Number(item[3]));
    return counts;
  }

  /**
   * New events for `consumer`, waiting up to `blockMs` for the first (on a connection of its
   * own). A read retried after a lost reply first reads the consumer's own pending events: the
   * lost read may have delivered them.
   */
  async read(session: string, group: string, consumer: string, count: number, blockMs: number): Promise<Delivery[]> {
    this.check(session, group, consumer);
    const log = this.log(session);
    let tries = 0;
    const [entries, own] = await this.call(session, group, () =>
      this.store.holding(async (connection): Promise<[Entry[], boolean]> => {
        tries += 1;
        if (tries > 1) {
          const pending = (await connection.xreadgroupBuffer("GROUP", group, consumer, "COUNT", count, "STREAMS", log, "0")) as unknown as [Buffer, Entry[]][] | null;
          const mine = pending?.[0]?.[1] ?? [];
          if (mine.length) return [mine, true];
        }
        const reply = (await connection.xreadgroupBuffer(
          "GROUP", group, consumer, "COUNT", count, "BLOCK", Math.max(1, blockMs), "STREAMS", log, ">",
        )) as unknown as [Buffer, Entry[]][] | null;
        return [reply?.[0]?.[1] ?? [], false];
      }),
    );
    return own ? this.ownPending(session, group, entries) : this.deliveries(session, group, entries, false);
  }

  /** The consumer's own events delivered and not acked (after its restart, or a failed read). */
  async pending(session: string, group: string, consumer: string, count: number): Promise<Delivery[]> {
    this.check(session, group, consumer);
    const log = this.log(session);
    const reply = (await this.call(session, group, () =>
      this.store.client.xreadgroupBuffer("GROUP", group, consumer, "COUNT", count, "STREAMS", log, "0"),
    )) as unknown as [Buffer, Entry[]][] | null;
    return this.ownPending(session, group, reply?.[0]?.[1] ?? []);
  }

  private async ownPending(session: string, group: string, entries: Entry[]): Promise<Delivery[]> {
    // An own pending entry deleted from the log comes back with no fields: nothing to redo.
    const gone = entries.filter(([, fields]) => !(fields as Buffer[] | null)?.length).map(([id]) => text(id));
    if (gone.length) await this.ack(session, group, gone);
    return this.deliveries(session, group, entries.filter(([, fields]) => (fields as Buffer[] | null)?.length), true);
  }

  /** Take over events other consumers left unacked at least `minIdleMs`. */
  async claim(session: string, group: string, consumer: string, minIdleMs: number, count: number): Promise<Delivery[]> {
    this.check(session, group, consumer);
    const log = this.log(session);
    const reply = (await this.call(session, group, () =>
      this.store.client.callBuffer("XAUTOCLAIM", log, group, consumer, minIdleMs, "0-0", "COUNT", count),
    )) as [Buffer, Entry[]];
    return this.deliveries(session, group, reply[1], true);
  }

  /** Reset the idle time of events a handler is still working on. */
  async keep(session: string, group: string, consumer: string, entryIds: string[]): Promise<void> {
    if (!entryIds.length) return;
    this.check(session, group, consumer);
    const log = this.log(session);
    await this.call(session, group, () => this.store.client.call("XCLAIM", log, group, consumer, 0, ...entryIds, "JUSTID"));
  }

  async ack(session: string, group: string, entryIds: string[]): Promise<number> {
    if (!entryIds.length) return 0;
    this.check(session, group);
    const log = this.log(session);
    return this.call(session, group, () => this.store.client.xack(log, group, ...entryIds));
  }

  /** Move an event the group gave up on to its dead-letter stream, and ack it: one transaction. */
  async deadLetter(session: string, group: string, delivery: Delivery, reason: string): Promise<void> {
    const fields = deadLetterOf(delivery, reason);
    const dead = this.store.keys.deadLetters(session, group);
    const log = this.log(session);
    await this.call(session, group, () =>
      this.store.client.multi().xadd(dead, "*", ...Object.entries(fields).flat()).xack(log, group, delivery.entryId).exec(),
    );
  }

  async deadLetters(session: string, group: string): Promise<Record<string, string>[]> {
    this.check(session, group);
    const entries = await this.store.run(() => this.store.client.xrange(this.store.keys.deadLetters(session, group), "-", "+"));
    return entries.map(([, flat]) => {
      const out: Record<string, string> = {};
      for (let i = 0; i < flat.length; i += 2) out[flat[i] as string] = flat[i + 1] as string;
      return out;
    });
  }

  /** Remove consumers idle at least `idleMs` and holding nothing; their names. */
  async prune(session: string, group: string, idleMs: number): Promise<string[]> {
    this.check(session, group);
    const removed = await this.call(session, group, () =>
      this.store.evalsha(PRUNE_CONSUMERS, this.store.keys.pruneConsumersKeys(session), [group, idleMs]),
    );
    return pruneConsumersReply(removed);
  }

  /** The group's last delivered cursor and how many events it holds delivered but not acked. */
  async stats(session: string, group: string): Promise<{ pending: number; lastDelivered: string }> {
    this.check(session, group);
    const found = (await this.store.run(() => this.store.client.xinfo("GROUPS", this.log(session)))) as unknown[][];
    const info = found.find((g) => g[g.indexOf("name") + 1] === group);
    if (info === undefined) throw new NotFound(`no consumer group '${group}' on session '${session}'`);
    return {
      pending: Number(info[info.indexOf("pending") + 1]),
      lastDelivered: ledgerCursor(String(info[info.indexOf("last-delivered-id") + 1])),
    };
  }
}
