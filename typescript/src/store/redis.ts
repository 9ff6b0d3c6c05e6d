/**
 * The Redis store: the Python package's layout and Lua scripts (ledger_bus/store/redis/), so
 * that a Python process and a Node process share one session, each reading what the other
 * wrote as its own: the same keys, the same script bytes, the same replies.
 */

import { randomBytes } from "node:crypto";

import type { Cluster, Redis } from "ioredis";

import { unpack } from "../model/artifacts.js";
import type { Artifact } from "../model/artifacts.js";
import type { Limits, PreparedAppend } from "../model/batch.js";
import { luaNotes, opensAttempt } from "../model/attempts.js";
import {
  BackendUnavailable,
  HistoryRewound,
  IdempotencyConflict,
  SessionArchived,
  BackendRefused,
  DurabilityNotConfirmed,
  UnexpectedReply,
  VersionConflict,
} from "../model/errors.js";
import { type Fence, leaseLost } from "../model/fences.js";
import { type Durability, durabilityName, isLocal, LOCAL } from "../model/durability.js";
import {
  checkName,
  cursorMs,
  formatCursor,
  ledgerCursor,
  parseCursor,
  redisCursor,
  type StreamId,
  streamText,
} from "../model/ids.js";
import type { AppendResult, OpenAttempt, RecordedEvent } from "../model/records.js";
import { checkLease, EventStore } from "./base.js";
import type { Attempts, Capability, Groups, LeaseStep } from "./capabilities.js";
import { ClusterTrouble, retried } from "./failures.js";
import { RedisGroups } from "./groups.js";
import { Keys } from "./keys.js";
import {
  type AppendReply,
  appendReply,
  artifactPutReply,
  type Entry,
  leaseReply,
  readStreamReply,
  text,
} from "./replies.js";
import { type LuaScript, script } from "./scripts.js";

export type RedisClient = Redis | Cluster;
export type Arg = string | Buffer | number;

const isCluster = (client: RedisClient): client is Cluster => client.isCluster;

/** append.lua's ARGV[9]: the lease an append is made under, or "" for none. */
const fenceArg = (fence: Fence | undefined): string =>
  fence === undefined ? "" : `${fence.lease}\x1f${fence.owner}\x1f${fence.token}`;

// How often the cross-session index is refreshed for one session by one store, at most.
const INDEX_REFRESH_MS = 1000;
// How often an append that opens attempts refreshes its session in the open-attempts index:
// a reconciler forgets a session only once its entry is older than its prune window.
const OPEN_INDEX_REFRESH_MS = 60_000;
// Between a session id and the token of an append's provisional open-attempts index entry.
const OPEN_MEMBER_SEP = "\x1f";
const ARTIFACT_CHUNK = 1024 * 1024;
const ARTIFACT_READ_CHUNKS = 4;
const ARTIFACT_UPLOAD_TTL_MS = 3_600_000;
// A blocking read waits in slices, so that a lost connection is noticed within one.
const MAX_BLOCK_MS = 5000;

const APPEND = script("append");
const ARTIFACT_PUT = script("artifact_put");
const READ_STREAM = script("read_stream");
const LEASE = script("lease");

export interface RedisStoreOptions {
  /** The prefix of every key: "lb" unless the deployment says otherwise. */
  prefix?: string;
  /** How long a call is retried through lost connections and failovers, in ms. */
  timeoutMs?: number;
  limits?: Partial<Limits>;
  /** What an append waits for (model/durability.ts): local unless said. */
  durability?: Durability;
}

/** A stream this store appends to: its highest version acknowledged here, and in which generation. */
class Written {
  acknowledged = 0;
  generation = 0;

  acknowledge(lastVersion: number, generation: number): void {
    if (generation > this.generation) {
      // the stream was deleted since: its count starts over
      this.generation = generation;
      this.acknowledged = lastVersion;
    } else if (generation === this.generation && lastVersion > this.acknowledged) {
      this.acknowledged = lastVersion;
    }
  }
}

export class RedisStore extends EventStore implements Attempts, Groups {
  readonly tier: string = "redis";
  override readonly capabilities: ReadonlySet<Capability> = new Set<Capability>(["log", "attempts", "groups"]);
  /** The consumer groups on this store's session logs, for a Tailer. */
  readonly groups: RedisGroups = new RedisGroups(this);
  readonly keys: Keys;
  readonly timeoutMs: number;
  private readonly written = new Map<string, Written>();
  private readonly indexed = new Map<string, number>();
  private readonly openIndexed = new Map<string, number>();
  private readonly idle: RedisClient[] = []; // connections for blocking reads, not in use
  private readonly blocking = new Set<RedisClient>();
  private readScript = true;
  private hasWaitaof: boolean | undefined;
  private readonly trouble: ClusterTrouble | undefined;
  readonly durability: Durability;

  constructor(
    readonly client: RedisClient,
    options: RedisStoreOptions = {},
  ) {
    super(options.limits);
    this.keys = new Keys(options.prefix ?? "lb");
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.durability = options.durability ?? LOCAL;
    this.trouble = isCluster(client) ? new ClusterTrouble(client) : undefined;
  }

  async close(): Promise<void> {
    for (const connection of [...this.blocking, ...this.idle]) connection.disconnect();
    this.client.disconnect();
  }

  // -- appends --------------------------------------------------------------------------------

  protected async appendPrepared(
    stream: StreamId,
    expected: number | undefined,
    appendId: string,
    prepared: PreparedAppend,
  ): Promise<AppendResult> {
    const session = stream.sessionId;
    const key = `${session}\x1f${stream.name}`;
    let written = this.written.get(key);
    if (written === undefined) this.written.set(key, (written = new Written()));
    const { acknowledged, generation } = written;
    const waits = !isLocal(this.durability);
    let keys = this.keys.appendKeys(stream.sessionId, stream.name);
    const args: Arg[] = [
      stream.name,
      expected ?? -1,
      appendId,
      prepared.sha256,
      prepared.payloads.length,
      acknowledged,
      // Written again even as a duplicate, so that the WAIT after it covers the original write.
      waits ? "1" : "",
      generation,
      fenceArg(prepared.fence),
      ...prepared.payloads,
      luaNotes(prepared.notes),
      ...prepared.uses.flat(),
    ];
    const opens = prepared.notes.some(opensAttempt);
    const listed = opens ? await this.listOpenSession(session) : undefined;
    if (prepared.artifacts.length) {
      keys = [...keys, ...this.keys.artifactKeys(session, prepared.artifacts.map((a) => a.ref.sha256))];
      await this.putArtifacts(session, prepared.artifacts, false);
    }
    let acks: unknown;
    const send = async (): Promise<AppendReply> => {
      let raw: unknown;
      if (waits) [raw, acks] = await retried(() => this.sendWaiting(keys, args), this.timeoutMs, this.trouble);
      else raw = await retried(() => this.evalsha(APPEND, keys, args), this.timeoutMs, this.trouble);
      return appendReply(raw);
    };
    let done = await send();
    for (let tries = 1; tries < 3 && done.kind === "noartifact"; tries++) {
      // An artifact written before went before the call ran (a deletion, its TTL): again.
      await this.putArtifacts(session, prepared.artifacts, true);
      done = await send();
    }
    if (listed !== undefined) await this.settleOpenListing(session, listed, done.kind === "ok" || done.kind === "dup");
    if (done.kind !== "ok" && done.kind !== "dup") throw this.refusal(stream, expected, appendId, acknowledged, done, prepared.fence);
    const result: AppendResult = {
      stream,
      firstVersion: done.first,
      lastVersion: done.last,
      cursor: ledgerCursor(done.cursor),
      deduplicated: done.kind === "dup",
    };
    if (!result.deduplicated) await this.touchIndex(session, cursorMs(result.cursor));
    const confirmed = waits ? this.confirm(result, acks) : result; // throws when not confirmed
    written.acknowledge(result.lastVersion, done.generation);
    return confirmed;
  }

  /**
   * The append script and its WAIT (or WAITAOF) in one pipeline, on the connection to the node
   * that holds the session: the WAIT counts exactly what that connection wrote, and costs no
   * round trip of its own.
   */
  private async sendWaiting(keys: string[], args: Arg[]): Promise<[unknown, unknown]> {
    const level = this.durability;
    if (level.aof && !(await this.waitaofAvailable())) {
      throw new BackendRefused(
        `durability ${durabilityName(level)} needs WAITAOF (Redis 7.2 or newer, or Valkey);` +
          " this server has none: nothing written",
      );
    }
    for (let tries = 0; ; tries++) {
      const pipe = this.client.pipeline();
      pipe.callBuffer("EVALSHA", APPEND.sha, keys.length, ...keys, ...args);
      if (level.aof) pipe.call("WAITAOF", 1, level.replicas, level.timeoutMs);
      else pipe.call("WAIT", level.replicas, level.timeoutMs);
      const replies = (await pipe.exec()) ?? [];
      const [failed, reply] = replies[0] ?? [new Error("no reply")];
      const [waitFailed, acks] = replies[1] ?? [new Error("no reply")];
      if (failed && failed.message.startsWith("NOSCRIPT") && tries === 0) {
        // The server lost the script (a restart, a failover); nothing of the append ran.
        await this.loadScript(APPEND);
        continue;
      }
      if (failed) throw failed;
      return [reply, waitFailed ?? acks];
    }
  }

  /** SCRIPT LOAD where appends run: the server, or every primary of a cluster. */
  private async loadScript(lua: LuaScript): Promise<void> {
    const client = this.client;
    if (isCluster(client)) {
      await Promise.all(client.nodes("master").map((node) => node.script("LOAD", lua.text)));
    } else {
      await client.script("LOAD", lua.text);
    }
  }

  private async waitaofAvailable(): Promise<boolean> {
    if (this.hasWaitaof === undefined) {
      try {
        // Asks for nothing, so it answers at once where the command exists.
        await this.client.call("WAITAOF", 0, 0, 1);
        this.hasWaitaof = true;
      } catch (err) {
        if (!(err instanceof Error && /unknown command/i.test(err.message))) throw err;
        this.hasWaitaof = false;
      }
    }
    return this.hasWaitaof;
  }

  /** The result with what was confirmed; DurabilityNotConfirmed when it falls short. */
  private confirm(result: AppendResult, acks: unknown): AppendResult {
    const wanted = this.durability;
    const name = durabilityName(wanted);
    const where = `stream ${streamText(result.stream)}: written on the primary (cursor ${result.cursor})`;
    if (acks instanceof Error) {
      throw new DurabilityNotConfirmed(
        `${where}, but durability ${name} could not be asked for: ${acks.message}; retry with the same appendId`,
        result,
      );
    }
    const [local, replicas] = wanted.aof ? (acks as number[]).map(Number) : [0, Number(acks)];
    const confirmed: AppendResult = {
      ...result,
      durability: name,
      replicas: replicas ?? 0,
      ...(wanted.aof ? { aof: Boolean(local) } : {}),
    };
    if ((replicas ?? 0) >= wanted.replicas && (local || !wanted.aof)) return confirmed;
    const missing: string[] = [];
    if (wanted.aof && !local) missing.push("the primary's AOF was not fsynced");
    if ((replicas ?? 0) < wanted.replicas) missing.push(`${replicas ?? 0} of ${wanted.replicas} replica(s) confirmed`);
    throw new DurabilityNotConfirmed(
      `${where}, not confirmed as ${name} within ${wanted.timeoutMs} ms: ${missing.join("; ")};` +
        " retry with the same appendId",
      confirmed,
    );
  }

  /** The error an append refused by append.lua raises. */
  private refusal(
    stream: StreamId,
    expected: number | undefined,
    appendId: string,
    known: number,
    reply: Exclude<AppendReply, { kind: "ok" | "dup" }>,
    fence: Fence | undefined,
  ): Error {
    const name = streamText(stream);
    switch (reply.kind) {
      case "rewound": {
        const key = `${stream.sessionId}\x1f${stream.name}`;
        return new HistoryRewound(name, known, reply.version, () => {
          const written = this.written.get(key);
          if (written) written.acknowledged = 0;
        });
      }
      case "conflict":
        return new VersionConflict(name, expected ?? -1, reply.version);
      case "idem":
        return new IdempotencyConflict(name, appendId);
      case "archived":
        return new SessionArchived(stream.sessionId, reply.where);
      case "fenced":
        // Only an append that named a fence is fenced: else the server runs other scripts.
        return fence === undefined
          ? new UnexpectedReply(`append.lua refused an append without a fence: its lease's token is ${reply.token}`)
          : leaseLost(fence, reply.token);
      case "noartifact":
        return new BackendUnavailable(`an artifact of the append kept going before the append: ${reply.key}`);
      case "noperm":
        return new BackendRefused(
          `redis refused the permission (ACL): this user may not ${reply.command} ${reply.key}; nothing written`,
        );
    }
  }

  async evalsha(
    lua: LuaScript,
    keys: string[],
    args: Arg[],
    readOnly = false,
  ): Promise<unknown> {
    // By hand rather than through ioredis's defineCommand, which sends EVAL with the whole
    // script on each new connection and never EVALSHA_RO: the roles `ledger-bus acl` writes
    // grant EVALSHA, EVALSHA_RO and SCRIPT LOAD, not EVAL (test/acl.test.ts).
    const command = readOnly ? "EVALSHA_RO" : "EVALSHA";
    try {
      return await this.client.callBuffer(command, lua.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (!(err instanceof Error && err.message.startsWith("NOSCRIPT"))) throw err;
      // The server has not got the script (a restart, a new node): nothing of it ran.
      await this.loadScript(lua);
      return await this.client.callBuffer(command, lua.sha, keys.length, ...keys, ...args);
    }
  }

  /** `make()` tried again through lost connections and failovers, until the store's timeout. */
  async run<T>(make: () => Promise<T>): Promise<T> {
    return retried(make, this.timeoutMs, this.trouble);
  }

  /**
   * List the session in the open-attempts index before an append that opens attempts, as a
   * provisional member of this append's own (`<session>\x1f<token>`): a writer killed right
   * after its request committed must not leave an open attempt no reconciler can find. Once a
   * minute per session; undefined when no listing was due.
   */
  private async listOpenSession(session: string): Promise<string | undefined> {
    const last = this.openIndexed.get(session) ?? -OPEN_INDEX_REFRESH_MS;
    if (Date.now() - last < OPEN_INDEX_REFRESH_MS) return undefined;
    const member = `${session}${OPEN_MEMBER_SEP}${randomBytes(8).toString("hex")}`;
    const key = this.keys.openIndexOf(session);
    await this.run(() => this.client.zadd(key, Date.now(), member));
    return member;
  }

  private async settleOpenListing(
    session: string,
    member: string,
    committed: boolean,
  ): Promise<void> {
    const key = this.keys.openIndexOf(session);
    const now = Date.now();
    try {
      if (committed) await this.client.zadd(key, "GT", now, session);
      await this.client.zrem(key, member);
      if (committed) this.openIndexed.set(session, now);
    } catch {
      // Left behind, the member still names the session to the reconciler.
    }
  }

  /** Refresh the session's last activity; a failure leaves the index a little stale. */
  private async touchIndex(session: string, ms: number): Promise<void> {
    if (ms - (this.indexed.get(session) ?? -INDEX_REFRESH_MS) < INDEX_REFRESH_MS) return;
    try {
      await this.client.zadd(this.keys.indexOf(session), "GT", ms, session);
      this.indexed.set(session, ms);
    } catch {
      // retried by the next append; `ledger-bus sessions --rebuild` repairs what is left
    }
  }

  /**
   * Write the artifacts the session does not hold (all of them `again`), each under a name of
   * its own until artifact_put.lua names it: a hash of 1 MiB chunks, a chunk per command, so
   * that no command holds the server for long.
   */
  private async putArtifacts(session: string, artifacts: Artifact[], again: boolean): Promise<void> {
    let todo = artifacts;
    if (!again) {
      const there = await Promise.all(
        artifacts.map((a) => this.run(() => this.client.exists(this.keys.artifact(session, a.ref.sha256)))),
      );
      todo = artifacts.filter((_, at) => !there[at]);
    }
    for (const artifact of todo) {
      const sha = artifact.ref.sha256;
      const names = this.keys.artifactPutKeys(session, sha, randomBytes(6).toString("hex"));
      const upload = names[0] as string;
      const chunks: Buffer[] = [];
      for (let at = 0; at < artifact.data.length; at += ARTIFACT_CHUNK) {
        chunks.push(artifact.data.subarray(at, at + ARTIFACT_CHUNK));
      }
      const send = async (): Promise<boolean> => {
        // The first chunk and the TTL together: an upload cut short goes by itself.
        await this.client
          .multi()
          .hset(upload, "0", chunks[0] as Buffer)
          .pexpire(upload, ARTIFACT_UPLOAD_TTL_MS)
          .exec();
        for (let n = 1; n < chunks.length; n++) await this.client.hset(upload, String(n), chunks[n] as Buffer);
        return artifactPutReply(await this.evalsha(ARTIFACT_PUT, names, [artifact.data.length, chunks.length]));
      };
      let done = false;
      for (let tries = 0; tries < 3 && !done; tries++) done = await this.run(send);
      if (!done) throw new BackendUnavailable(`artifact sha256:${sha} could not be written whole`);
    }
  }

  // -- reads ----------------------------------------------------------------------------------

  /** Session log entries as recorded events (a stream reference made once per stream). */
  records(sessionId: string, entries: Entry[]): RecordedEvent[] {
    const refs = new Map<string, StreamId>();
    return entries.map(([id, flat]) => {
      const fields = new Map<string, Buffer>();
      for (let i = 0; i < flat.length; i += 2) fields.set(text(flat[i]), flat[i + 1] as Buffer);
      const name = text(fields.get("s"));
      let stream = refs.get(name);
      if (stream === undefined) {
        stream = Object.freeze({ sessionId, name });
        refs.set(name, stream);
      }
      return {
        stream,
        version: Number(text(fields.get("v"))),
        cursor: ledgerCursor(text(id)),
        fields: unpack(fields.get("p") as Buffer),
      };
    });
  }

  protected async readStreamPage(
    stream: StreamId,
    after: number,
    count: number,
  ): Promise<RecordedEvent[]> {
    const keys = this.keys.readStreamKeys(stream.sessionId, stream.name);
    if (this.readScript) {
      try {
        const found = await this.run(() => this.evalsha(READ_STREAM, keys, [after + 1, count], true));
        return this.records(stream.sessionId, readStreamReply(found));
      } catch (err) {
        if (!(err instanceof BackendRefused && /unknown command/i.test(err.message))) throw err;
        this.readScript = false; // a server without EVALSHA_RO: the two reads below
      }
    }
    return this.readStreamTwice(stream, keys[0] as string, keys[1] as string, after + 1, count);
  }

  private async readStreamTwice(
    stream: StreamId,
    index: string,
    log: string,
    first: number,
    count: number,
  ): Promise<RecordedEvent[]> {
    const [head, rest] = await this.run(() =>
      Promise.all([
        this.client.xrevrangeBuffer(index, `${first}-0`, "-", "COUNT", 1),
        this.client.xrangeBuffer(index, `(${first}-0`, "+", "COUNT", count),
      ]),
    );
    const plan: [string, number, number][] = [];
    let wanted = count;
    for (const [id, flat] of [...head, ...rest] as unknown as Entry[]) {
      const start = Number(text(id).split("-")[0]);
      let cursor = "";
      let n = 0;
      for (let i = 0; i < flat.length; i += 2) {
        if (text(flat[i]) === "c") cursor = text(flat[i + 1]);
        if (text(flat[i]) === "n") n = Number(text(flat[i + 1]));
      }
      const skip = Math.max(0, first - start);
      const take = Math.min(n - skip, wanted);
      if (take > 0) {
        plan.push([cursor, skip, take]);
        wanted -= take;
      }
      if (!wanted) break;
    }
    const found = await this.run(() =>
      Promise.all(plan.map(([cursor, skip, take]) => this.client.xrangeBuffer(log, cursor, "+", "COUNT", skip + take))),
    );
    const entries = plan.flatMap(([, skip, take], at) =>
      (found[at] as unknown as Entry[]).slice(skip, skip + take),
    );
    return this.records(stream.sessionId, entries);
  }

  protected async scanPage(
    sessionId: string,
    after: string | undefined,
    count: number,
  ): Promise<RecordedEvent[]> {
    const start = after === undefined ? "-" : `(${redisCursor(after)}`;
    const log = this.keys.log(sessionId);
    const entries = await this.run(() => this.client.xrangeBuffer(log, start, "+", "COUNT", count));
    return this.records(sessionId, entries);
  }

  protected async tailPage(
    sessionId: string,
    n: number,
    before: string | undefined,
  ): Promise<RecordedEvent[]> {
    const end = before === undefined ? "+" : `(${redisCursor(before)}`;
    const log = this.keys.log(sessionId);
    const entries = await this.run(() => this.client.xrevrangeBuffer(log, end, "-", "COUNT", n));
    return this.records(sessionId, (entries as unknown as Entry[]).reverse());
  }

  protected async waitPage(
    sessionId: string,
    after: string | undefined,
    timeoutMs: number,
    count: number,
  ): Promise<RecordedEvent[]> {
    const log = this.keys.log(sessionId);
    let last: string;
    if (after === undefined) {
      // "$" would be read again on every slice and miss what lands in between: pin it.
      const newest = await this.run(() => this.client.xrevrange(log, "+", "-", "COUNT", 1));
      last = newest.length ? (newest[0] as [string, string[]])[0] : "0-0";
    } else {
      last = redisCursor(after);
    }
    const deadline = Date.now() + timeoutMs;
    return this.holding(async (connection) => {
      for (;;) {
        const block = Math.max(1, Math.min(MAX_BLOCK_MS, deadline - Date.now()));
        const reply = await this.run(() =>
          connection.xreadBuffer("COUNT", count, "BLOCK", block, "STREAMS", log, last),
        );
        if (reply && reply.length) return this.records(sessionId, (reply[0] as [Buffer, Entry[]])[1]);
        if (Date.now() >= deadline) return [];
      }
    });
  }

  /**
   * `use(connection)` on a connection of its own, for a blocking read: the read holds the
   * connection while it waits, and the store's other calls must not queue behind it.
   */
  async holding<T>(use: (connection: RedisClient) => Promise<T>): Promise<T> {
    let connection = this.idle.pop();
    if (connection === undefined) {
      connection = this.duplicate();
      connection.on("error", () => undefined);
    }
    this.blocking.add(connection);
    try {
      return await use(connection);
    } finally {
      this.blocking.delete(connection);
      this.idle.push(connection);
    }
  }

  /** A connection of its own for a blocking read: it holds the connection while it waits. */
  private duplicate(): RedisClient {
    const client = this.client;
    // Two branches alike on purpose: each narrows the union, whose two duplicate() signatures
    // TypeScript cannot call as one.
    return isCluster(client) ? client.duplicate() : client.duplicate();
  }

  protected async versionOf(stream: StreamId): Promise<number> {
    const meta = this.keys.meta(stream.sessionId);
    return Number((await this.run(() => this.client.hget(meta, stream.name))) ?? 0);
  }

  protected async sessionList(limit: number | undefined): Promise<[string, number][]> {
    const stop = limit === undefined ? -1 : limit - 1;
    const buckets = await this.run(() =>
      Promise.all(
        this.keys.allIndexes().map((key) => this.client.zrange(key, 0, stop, "REV", "WITHSCORES")),
      ),
    );
    const found: [string, number][] = [];
    for (const flat of buckets) {
      for (let i = 0; i < flat.length; i += 2) found.push([flat[i] as string, Number(flat[i + 1])]);
    }
    found.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return limit === undefined ? found : found.slice(0, limit);
  }

  async openAttempts(sessionId: string): Promise<OpenAttempt[]> {
    checkName(sessionId, "session id");
    const found = await this.run(() => this.client.hgetall(this.keys.openAttempts(sessionId)));
    return Object.entries(found).map(([attemptId, value]) => {
      const [runId, tool, stream, cursor, flagged] = value.split("\x1f") as [string, string, string, string, string];
      return {
        sessionId,
        attemptId,
        ...(runId ? { runId } : {}),
        tool,
        stream,
        cursor: formatCursor(...parseCursor(cursor)),
        ...(flagged ? { flaggedCursor: formatCursor(...parseCursor(flagged)) } : {}),
      };
    });
  }

  async lease(step: LeaseStep, sessionId: string, name: string, owner: string, ttlMs: number): Promise<number> {
    checkLease(sessionId, name);
    const keys = this.keys.leaseKeys(sessionId, name);
    return leaseReply(await this.run(() => this.evalsha(LEASE, keys, [step, owner, ttlMs, name])));
  }

  protected async artifactBytes(sessionId: string, sha256: string): Promise<Buffer | undefined> {
    const key = this.keys.artifact(sessionId, sha256);
    const uses = this.keys.artifactUses(sessionId);
    const names = Array.from({ length: ARTIFACT_READ_CHUNKS }, (_, n) => String(n));
    return this.run(async () => {
      const [referenced, count, first] = await Promise.all([
        this.client.hexists(uses, sha256),
        this.client.hlen(key),
        this.client.hmgetBuffer(key, ...names),
      ]);
      if (!referenced || !count) return undefined; // one written for an append yet to commit is not yet one
      const parts = first.slice(0, count);
      // A few chunks a round trip: all at once would have the server copy it whole into a reply.
      for (let start = ARTIFACT_READ_CHUNKS; start < count; start += ARTIFACT_READ_CHUNKS) {
        const more = Array.from({ length: Math.min(count, start + ARTIFACT_READ_CHUNKS) - start }, (_, n) => String(start + n));
        parts.push(...(await this.client.hmgetBuffer(key, ...more)));
      }
      if (parts.some((part) => part === null)) return undefined; // deleted while read (a Redis nil)
      return Buffer.concat(parts as Buffer[]);
    });
  }
}
