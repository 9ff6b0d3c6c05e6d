/** An append's events, checked, canonicalised, digested and encoded once, for any store. */

import { createHash } from "node:crypto";

import {
  type Artifact,
  artifactOf,
  DEFAULT_MAX_ARTIFACT_BYTES,
  DEFAULT_THRESHOLD,
  movable,
  pack,
  REF_BYTES,
} from "./artifacts.js";
import { canonicalText, checkJson, JsonValueError } from "./canonical.js";
import { InvalidEvent, InvalidInput } from "./errors.js";
import { type Fields, givenFields } from "./events.js";
import type { Fence } from "./fences.js";
import { codePoints, eventIdDeriver } from "./ids.js";
import { noteText, settled } from "./attempts.js";

/** Bounds on what one append may carry (the Python package's `Limits`, the same defaults). */
export interface Limits {
  maxEventBytes: number;
  maxEventsPerAppend: number;
  maxAppendBytes: number;
  /** An event whose canonical size passes it keeps its largest fields as artifacts; null: never. */
  artifactThreshold: number | null;
  maxArtifactBytes: number;
}

export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  maxEventBytes: 1024 * 1024,
  // One append is one Lua call, and a Lua call blocks the whole server while it runs.
  maxEventsPerAppend: 1000,
  maxAppendBytes: 8 * 1024 * 1024,
  artifactThreshold: DEFAULT_THRESHOLD,
  maxArtifactBytes: DEFAULT_MAX_ARTIFACT_BYTES,
});

/** What a store writes for one append. */
export interface PreparedAppend {
  /** sha256 of the RFC 8785 array of the events as given. */
  sha256: Buffer;
  /** The events' fields, event_id filled in, as recorded. */
  fields: Fields[];
  /** msgpack of each event's fields (references in place of the fields moved out). */
  payloads: Buffer[];
  /** Per event, its note for the open-attempts bookkeeping ("" for none). */
  notes: string[];
  /** The fields moved out, each artifact once, and how often the payloads reference each. */
  artifacts: Artifact[];
  uses: [string, number][];
  /**
   * The lease the append is made under, checked on the server with the write; not part of the
   * content (a retry of an append recorded under it still returns its result).
   */
  fence?: Fence;
}

function byteLength(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

/** The canonical text of one event's fields, or InvalidEvent naming the place at fault. */
function canonicalEvent(fields: Fields, index: number): string {
  try {
    checkJson(fields);
  } catch (err) {
    if (err instanceof JsonValueError) {
      throw new InvalidEvent(err.message, { index, field: err.where || undefined });
    }
    throw err;
  }
  return canonicalText(fields);
}

/**
 * Check and encode the events of one append, or InvalidEvent naming the first fault. The digest
 * covers the events as the caller gave them (RFC 8785 over their set fields); the event ids the
 * ledger generates for events without one are filled in afterwards.
 */
export function prepareAppend(
  sessionId: string,
  stream: string,
  appendId: string,
  events: unknown,
  limits: Limits = DEFAULT_LIMITS,
): PreparedAppend {
  if (!Array.isArray(events)) throw new InvalidInput("events must be a list of events");
  if (events.length === 0) throw new InvalidEvent("an append needs at least one event");
  if (events.length > limits.maxEventsPerAppend) {
    throw new InvalidEvent(
      `${events.length} events in one append; the limit is ${limits.maxEventsPerAppend}`,
    );
  }
  const all = events.map((raw, index) => givenFields(raw, index));
  const texts = all.map((fields, index) => canonicalEvent(fields, index));
  const whole = `[${texts.join(",")}]`;
  const moved = new Map<number, Map<string, Artifact>>();
  const small = Math.min(limits.maxEventBytes, limits.artifactThreshold ?? Infinity);
  // The common append: the whole array is below any one event's limit, so no event is over
  // its own; only the total is looked at. Else each event, in order, names the first at fault.
  if (Buffer.byteLength(whole) > small) checkSizes(all, texts, moved, limits);
  else if (Buffer.byteLength(whole) - all.length - 1 > limits.maxAppendBytes) {
    throw new InvalidEvent(`the append exceeds ${limits.maxAppendBytes} bytes in all`);
  }
  const sha256 = createHash("sha256").update(whole, "utf8").digest();
  const derive = eventIdDeriver(sessionId, stream, appendId);
  all.forEach((fields, index) => {
    if (!("event_id" in fields)) fields["event_id"] = derive(index);
  });
  const notes = settled(all.map(noteText));
  const artifacts = new Map<string, Artifact>();
  const uses = new Map<string, number>();
  const payloads = all.map((fields, index) => {
    const out = moved.get(index);
    if (out === undefined) return pack(fields);
    const refs: Fields = {};
    for (const [name, value] of Object.entries(fields)) {
      refs[name] = out.get(name)?.ref ?? value;
    }
    for (const artifact of out.values()) {
      const sha = artifact.ref.sha256;
      if (!artifacts.has(sha)) artifacts.set(sha, artifact);
      uses.set(sha, (uses.get(sha) ?? 0) + 1);
    }
    return pack(refs);
  });
  return {
    sha256,
    fields: all,
    payloads,
    notes,
    artifacts: [...artifacts.values()],
    uses: [...uses.entries()],
  };
}

/**
 * Each event's size against the limits, in order (InvalidEvent names the first at fault), and
 * the fields of those above the artifact threshold moved out (into `moved`, by event index).
 */
function checkSizes(all: Fields[], texts: string[], moved: Map<number, Map<string, Artifact>>, limits: Limits): void {
  let total = 0;
  all.forEach((fields, index) => {
    let size = byteLength(texts[index] as string);
    const threshold = limits.artifactThreshold;
    if (threshold !== null && size > threshold) {
      const [out, left] = moveOut(index, fields, size, threshold, limits);
      if (out.size) moved.set(index, out);
      size = left;
    }
    if (size > limits.maxEventBytes) {
      const kept = moved.has(index) ? " outside its artifacts" : "";
      throw new InvalidEvent(`${size} bytes of canonical JSON${kept}; the limit is ${limits.maxEventBytes}`, { index });
    }
    total += size;
    if (total > limits.maxAppendBytes) {
      throw new InvalidEvent(`the append exceeds ${limits.maxAppendBytes} bytes in all`);
    }
  });
}

/**
 * The artifacts of an event's largest fields, taken until the event is below `threshold`, and
 * the event's canonical size (about) once they are out: the Python package's rule, so that an
 * event appended from either language keeps the same fields apart.
 */
function moveOut(
  index: number,
  fields: Fields,
  size: number,
  threshold: number,
  limits: Limits,
): [Map<string, Artifact>, number] {
  const sized: [number, string, unknown, Buffer | undefined][] = [];
  for (const name of movable(fields)) {
    const value = fields[name];
    const canonical =
      typeof value === "string" ? undefined : Buffer.from(canonicalText(value as never), "utf8");
    // A string's artifact is its UTF-8 text, about its canonical size: not canonicalised.
    const length = canonical ? canonical.length : byteLength(value as string) + 2;
    sized.push([length + codePoints(name), name, value, canonical]);
  }
  sized.sort((a, b) => b[0] - a[0]);
  const out = new Map<string, Artifact>();
  for (const [fieldSize, name, value, canonical] of sized) {
    if (size <= threshold || fieldSize <= REF_BYTES) break;
    const artifact = artifactOf(value, canonical);
    if (artifact.ref.size > limits.maxArtifactBytes) {
      throw new InvalidEvent(
        `${artifact.ref.size} bytes; the limit of an artifact is ${limits.maxArtifactBytes}`,
        { index, field: name },
      );
    }
    out.set(name, artifact);
    size -= fieldSize - REF_BYTES;
  }
  return [out, size];
}
