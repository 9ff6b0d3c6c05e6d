/**
 * Large event fields kept apart from their events, as content-addressed artifacts (spec 3.11),
 * as the Python package keeps them (ledger_bus/model/artifacts.py): an event whose canonical
 * JSON passes the threshold keeps its largest content fields out of its payload, each stored
 * once per session under the sha256 of its bytes (a string as its UTF-8 text, anything else as
 * its RFC 8785 JSON), the payload holding a reference in its place: a msgpack extension value
 * (type 1, the msgpack of [sha256, size, media type]) that no JSON value can be.
 */

import { createHash } from "node:crypto";

import { decode, Decoder, encode, Encoder, ExtensionCodec } from "@msgpack/msgpack";

import { canonicalBytes } from "./canonical.js";
import { InvalidInput } from "./errors.js";
import type { Fields } from "./events.js";

export const EXT_CODE = 1;
export const TEXT = "text/plain; charset=utf-8";
export const JSON_TYPE = "application/json";
export const DEFAULT_THRESHOLD = 64 * 1024;
export const DEFAULT_MAX_ARTIFACT_BYTES = 64 * 1024 * 1024;
/** What a reference costs in an event's canonical size, about: a field moved out must save more. */
export const REF_BYTES = 160;
// Fields that say what an event is rather than what it carries: never moved out.
const FRAME = new Set([
  "type",
  "agent",
  "event_id",
  "run_id",
  "step_id",
  "attempt_id",
  "parents",
  "tool",
  "status",
]);

/** Where a field's value went: the sha256 (hex) of its bytes, their size and media type. */
export class ArtifactRef {
  constructor(
    readonly sha256: string,
    readonly size: number,
    readonly mediaType: string,
  ) {}

  /** The reference as JSON shows it (a read with `resolveArtifacts: false`). */
  toJSON(): { artifact: string; size: number; media_type: string } {
    return { artifact: `sha256:${this.sha256}`, size: this.size, media_type: this.mediaType };
  }

  /** The field's value from the artifact's bytes. */
  valueOf(data: Buffer): unknown {
    const text = data.toString("utf8");
    return this.mediaType === TEXT ? text : (JSON.parse(text) as unknown);
  }
}

/** An artifact to store: its reference and its bytes. */
export interface Artifact {
  ref: ArtifactRef;
  data: Buffer;
}

export function artifactOf(value: unknown, canonical?: Buffer): Artifact {
  const [data, mediaType] =
    typeof value === "string"
      ? [Buffer.from(value, "utf8"), TEXT]
      : [canonical ?? canonicalBytes(value), JSON_TYPE];
  const sha = createHash("sha256").update(data).digest("hex");
  return { ref: new ArtifactRef(sha, data.length, mediaType), data };
}

/** The fields of an event that may be moved out; a mutation's `kind` names it, and stays. */
export function movable(fields: Fields): string[] {
  const mutation = fields["type"] === "mutation";
  return Object.keys(fields).filter((name) => !FRAME.has(name) && !(mutation && name === "kind"));
}

const codec = new ExtensionCodec();
codec.register({
  type: EXT_CODE,
  encode: (value: unknown) =>
    value instanceof ArtifactRef ? encode([value.sha256, value.size, value.mediaType]) : null,
  decode: (data: Uint8Array) => {
    const [sha256, size, mediaType] = decode(data) as [string, number, string];
    return new ArtifactRef(sha256, size, mediaType);
  },
});

// One encoder and one decoder for every payload: made per call, they cost more than the
// encoding of a small event. Events nest up to MAX_DEPTH (128) levels; the default stops at 100.
const encoder = new Encoder({ extensionCodec: codec, ignoreUndefined: true, maxDepth: 256 });
const decoder = new Decoder({ extensionCodec: codec });

/** An event's payload: its fields in msgpack, references as extension values. */
export function pack(fields: Fields): Buffer {
  const packed = encoder.encode(fields);
  return Buffer.from(packed.buffer, packed.byteOffset, packed.byteLength);
}

/** An event's fields from its payload, references as ArtifactRef values. */
export function unpack(payload: Uint8Array): Fields {
  return decoder.decode(payload) as Fields;
}

/** The references among an event's fields. */
export function refsIn(fields: Fields): ArtifactRef[] {
  return Object.values(fields).filter((value): value is ArtifactRef => value instanceof ArtifactRef);
}

/** The fields with each reference replaced by its value. */
export function resolved(fields: Fields, fetch: (ref: ArtifactRef) => Buffer): Fields {
  const out: Fields = {};
  for (const [name, value] of Object.entries(fields)) {
    out[name] = value instanceof ArtifactRef ? value.valueOf(fetch(value)) : value;
  }
  return out;
}

/** An artifact's sha256 as the stores key it: 64 lowercase hex digits ("sha256:" allowed). */
export function checkSha(text: string): string {
  const digest = text.replace(/^sha256:/, "").toLowerCase();
  if (!/^[0-9a-f]{64}$/.test(digest)) throw new InvalidInput(`not a sha256: '${text}'`);
  return digest;
}
