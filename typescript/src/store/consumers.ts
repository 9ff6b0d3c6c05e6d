/**
 * What a consumer group hands out and what a tailer asks of one, whichever store keeps the
 * groups: Redis (groups.ts) or this process (memorygroups.ts).
 */

import type { RecordedEvent } from "../model/records.js";

/** One session log entry handed to a consumer: the event, and how often it was handed out. */
export interface Delivery {
  readonly event: RecordedEvent;
  /** What acks it; opaque to callers. */
  readonly entryId: string;
  readonly deliveries: number;
}

/** What a group's dead letters say of an event it gave up on (Python's dead letters say the same). */
export function deadLetterOf(delivery: Delivery, reason: string): Record<string, string> {
  const event = delivery.event;
  return {
    entry: delivery.entryId,
    cursor: event.cursor,
    stream: event.stream.name,
    version: String(event.version),
    event_id: String(event.fields["event_id"]),
    deliveries: String(delivery.deliveries),
    reason,
  };
}

/** What a tailer asks of a store's consumer groups: Redis's (`RedisGroups`) or this process's (`MemoryGroups`). */
export interface GroupBackend {
  /** Make the group, reading after the cursor `after` (none: after what is there now); false if it was there. */
  create(session: string, group: string, after?: string): Promise<boolean>;
  exists(session: string, group: string): Promise<boolean>;
  read(session: string, group: string, consumer: string, count: number, blockMs: number): Promise<Delivery[]>;
  pending(session: string, group: string, consumer: string, count: number): Promise<Delivery[]>;
  claim(session: string, group: string, consumer: string, minIdleMs: number, count: number): Promise<Delivery[]>;
  keep(session: string, group: string, consumer: string, entryIds: string[]): Promise<void>;
  ack(session: string, group: string, entryIds: string[]): Promise<number>;
  deadLetter(session: string, group: string, delivery: Delivery, reason: string): Promise<void>;
  deadLetters(session: string, group: string): Promise<Record<string, string>[]>;
  prune(session: string, group: string, idleMs: number): Promise<string[]>;
  stats(session: string, group: string): Promise<{ pending: number; lastDelivered: string }>;
}
