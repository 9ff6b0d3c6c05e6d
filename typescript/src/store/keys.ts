/**
 * Every Redis key name the ledger uses, as the Python package names them
 * (ledger_bus/store/redis/keys.py): all keys of a session carry the hash tag `{<session>}`, so
 * one Lua call touches one slot and the layout runs unchanged on Redis Cluster.
 */

import { bucketOf, INDEX_BUCKETS } from "../model/buckets.js";

export class Keys {
  constructor(readonly prefix = "lb") {}

  private of(sessionId: string, rest: string): string {
    return `${this.prefix}:{${sessionId}}:${rest}`;
  }

  log(s: string): string {
    return this.of(s, "log");
  }
  meta(s: string): string {
    return this.of(s, "meta");
  }
  stream(s: string, stream: string): string {
    return this.of(s, `s:${stream}`);
  }
  idempotency(s: string, stream: string): string {
    return this.of(s, `idem:${stream}`);
  }
  openAttempts(s: string): string {
    return this.of(s, "open");
  }
  safeTools(s: string): string {
    return this.of(s, "safe");
  }
  tombstone(s: string): string {
    return this.of(s, "tomb");
  }
  artifact(s: string, sha: string): string {
    return this.of(s, `art:${sha}`);
  }
  artifactUpload(s: string, sha: string, token: string): string {
    return this.of(s, `art:${sha}:${token}`);
  }
  artifactUses(s: string): string {
    return this.of(s, "arts");
  }
  lease(s: string, name: string): string {
    return this.of(s, `lease:${name}`);
  }
  /** Hash: lease name -> the token of its current holding (lease.lua; append.lua reads it). */
  fences(s: string): string {
    return this.of(s, "fences");
  }
  deadLetters(s: string, group: string): string {
    return this.of(s, `dead:${group}`);
  }
  openIndex(bucket: number): string {
    return `${this.prefix}:open-sessions:{${this.prefix}-${String(bucket).padStart(2, "0")}}`;
  }
  openIndexOf(s: string): string {
    return this.openIndex(bucketOf(s));
  }
  index(bucket: number): string {
    return `${this.prefix}:sessions:{${this.prefix}-${String(bucket).padStart(2, "0")}}`;
  }
  indexOf(s: string): string {
    return this.index(bucketOf(s));
  }
  allIndexes(): string[] {
    return Array.from({ length: INDEX_BUCKETS }, (_, bucket) => this.index(bucket));
  }

  // Each script's KEYS, in the order ledger_bus/store/lua/protocol.json gives them
  // (test/protocol.test.ts holds every builder here to it).

  /** append.lua's KEYS for an append to `stream`, but its artifacts'. */
  appendKeys(s: string, stream: string): string[] {
    return [
      this.log(s),
      this.meta(s),
      this.stream(s, stream),
      this.idempotency(s, stream),
      this.openAttempts(s),
      this.safeTools(s),
      this.tombstone(s),
    ];
  }
  /** The KEYS append.lua takes after its own for events that keep fields as artifacts `shas`. */
  artifactKeys(s: string, shas: string[]): string[] {
    return [this.artifactUses(s), ...shas.map((sha) => this.artifact(s, sha))];
  }
  artifactPutKeys(s: string, sha: string, token: string): string[] {
    return [this.artifactUpload(s, sha, token), this.artifact(s, sha)];
  }
  readStreamKeys(s: string, stream: string): string[] {
    return [this.stream(s, stream), this.log(s)];
  }
  leaseKeys(s: string, name: string): string[] {
    return [this.lease(s, name), this.fences(s)];
  }
  pruneConsumersKeys(s: string): string[] {
    return [this.log(s)];
  }
}
