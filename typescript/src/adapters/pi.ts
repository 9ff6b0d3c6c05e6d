/**
 * Pi (`@earendil-works/pi-coding-agent` 1.x) on the ledger: a session manager that keeps Pi's session
 * tree in a framework stream of a ledger session, Pi's messages as normalized events beside it,
 * and Pi's tool executions as requested and terminal attempts through its awaited hooks.
 *
 *     const pi = await PiLedger.open(store, { session: "task-42", cwd });
 *     const { session } = await createAgentSession({
 *       cwd, sessionManager: pi.sessionManager, resourceLoader: loaderWith(pi.extension), ... });
 *     await session.prompt("fix the failing test");
 *     await pi.close();
 *
 * Layout. A Pi session `<id>` is the stream `pi.<id>` of the ledger session: a `pi.session`
 * mutation holds its header, a `pi.entry` mutation each entry as Pi wrote it (id, parentId,
 * timestamp and all), a `pi.leaf` mutation each move of the active leaf that appended nothing
 * (`branch`, `resetLeaf`). Each entry is one append, atomic with its normalized events: a user
 * message is a `message` of agent `user`; an assistant message a `message` with its model and
 * token usage, and each of its tool calls a `tool_call` whose attempt_id is the call's id; a
 * tool result the `tool_result` paired with it; the model calls behind a compaction, a branch
 * summary or a `usage` entry, model calls with their usage. The tree loads back entry for entry,
 * the active leaf with it, and a Pi session file imported exports back byte for byte.
 *
 * Tools. An assistant message's tool calls are committed with it; Pi's `tool_call` hook, which
 * Pi awaits before it runs a tool, waits for that append, and blocks the tool when it could not
 * be written. The `tool_result` hook records the outcome before Pi goes on. A call another tool
 * made (`parentToolCallId`: a codemode script's, an `executeTool`'s), which the transcript never
 * shows, is recorded by the hooks alone, as a child of its parent call. While the session is
 * open it holds a lease (`run-pi.<id>`), so a process SIGKILLed inside a tool leaves an open
 * attempt the reconciler flags once the lease is gone, and a second process opening the session
 * is refused in one line. Every append is made under the lease's fence (its holding's token), so
 * a process whose lease lapsed (stopped past it, cut off from Redis) is refused by the store
 * itself at its next write, whatever it had queued: PiSessionTaken, saying whether another
 * process took the session over or the lease expired with nobody taking it; nothing of that
 * write is stored, nothing more is written from it, and the holder of the session is never
 * refused for what it tried.
 *
 * `resume()` completes what a crash left dangling on the active branch: a call whose outcome the
 * ledger holds (recorded, or given by `ledger-bus resolve`) gets that outcome as its tool result,
 * so the tool does not run again; an unresolved call stops the resume (UnresolvedAttempt) unless
 * the tool is safe to replay.
 *
 * Written against pi-coding-agent 1.6 (its users left 0.73, `@mariozechner/pi-coding-agent`,
 * which this adapter no longer loads): the session manager is Pi's own, made by
 * `SessionManager.inMemory(cwd, options, entries)` from the ledger's entries, its `_persist`
 * replaced; tests hold the round trip to Pi's own behaviour.
 */

import { randomUUID } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";

import {
  type ExtensionAPI,
  type ExtensionFactory,
  type FileEntry,
  parseSessionEntries,
  type SessionEntry,
  type SessionHeader,
  SessionManager,
  type ToolDefinition,
} from "@earendil-works/pi-coding-agent";

import { UnresolvedAttempt } from "../calls.js";
import { calling, type CurrentCall } from "../current.js";
import { LeaseLost, LedgerError, VersionConflict } from "../model/errors.js";
import type { Fence } from "../model/fences.js";
import { checkName, streamId, type StreamId } from "../model/ids.js";
import { idempotencyKey } from "../model/keys.js";
import type { RecordedEvent } from "../model/records.js";
import { type Attempts, type Log, need } from "../store/capabilities.js";

export const AGENT = "pi";
export const HEADER = "pi.session";
export const ENTRY = "pi.entry";
export const LEAF = "pi.leaf";
const LEASE_MS = 10_000;
// What Pi's tool hooks and this adapter guarantee, as the Python adapters publish theirs.
export const CAPABILITIES = {
  profile: "pi",
  request_before_call: "strict",
  record_outcome: "strict",
  recovery: "strict",
} as const;

type Fields = Record<string, unknown>;
type Json = Record<string, unknown>;

/**
 * This process's hold of a Pi session is over: its lease lapsed (it was stopped, or cut off from
 * Redis), and another process took the session over, or nobody did and the lease expired. The
 * write that found it out is not stored, and nothing more is written from this one.
 */
export class PiSessionTaken extends LedgerError {
  override name = "PiSessionTaken";
}

export interface PiLedgerOptions {
  /** The ledger session the Pi session is kept in. */
  session: string;
  /** The Pi session to open; a new one when not given, or not in the ledger yet. */
  piSession?: string;
  /** Pi's working directory, kept in a new session's header. */
  cwd?: string;
  /** The agent name on the events the adapter writes (the user's messages are agent `user`). */
  agent?: string;
  /** Tools that are safe to run twice: a call of one that a crash left unresolved is run again. */
  safeToReplay?: readonly string[];
  /** How long the session's lease lives without renewal. */
  leaseTtlMs?: number;
}

/** The text of a message's content: a string, or its text blocks joined. */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((block): block is { type: "text"; text: string } => (block as Json)["type"] === "text")
    .map((block) => block.text)
    .join("\n");
}

/** JSON-safe copy (Pi's entries are JSON; `undefined` fields go, as in Pi's own files). */
function plain<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** A Pi session kept in a ledger session. */
export class PiLedger {
  private manager: SessionManager | undefined;
  readonly agent: string;
  private stream: StreamId;
  private version = 0;
  private queue: Promise<void> = Promise.resolve();
  private failed: Error | undefined;
  private readonly recorded: Recorded = { requested: new Map(), resulted: new Set() };
  private readonly owner = randomUUID();
  private renewer: NodeJS.Timeout | undefined;
  private leaseName = "";
  // The session's lease as this process holds it: every append names it, so that once the
  // holding is over the store refuses the append (nothing written), whatever this process had
  // queued while it was stopped, and before any version check could take it for a retry.
  private fence: Fence | undefined;
  private readonly safe: Set<string>;
  private readonly leaseTtlMs: number;

  private constructor(
    readonly store: Log & Attempts,
    readonly session: string,
    piSession: string,
    options: PiLedgerOptions,
  ) {
    this.agent = options.agent ?? AGENT;
    this.safe = new Set(options.safeToReplay ?? []);
    this.leaseTtlMs = options.leaseTtlMs ?? LEASE_MS;
    this.stream = streamId(session, `pi.${piSession}`);
  }

  /**
   * Open (or start) a Pi session in the ledger session `options.session`. The store must have
   * leases and open attempts besides its log: Unsupported when it has not. Refused in one line
   * while another live process has the Pi session open.
   */
  static async open(store: Log, options: PiLedgerOptions): Promise<PiLedger> {
    const attempts = need(store, "attempts");
    checkName(options.session, "session id");
    const cwd = options.cwd ?? process.cwd();
    // A new session's id is Pi's own (a manager made for it); a known one is held before it is
    // read, so that what is read is what the next append follows.
    const fresh = options.piSession === undefined ? SessionManager.inMemory(cwd) : undefined;
    const id = options.piSession ?? (fresh as SessionManager).getSessionId();
    const ledger = new PiLedger(attempts, options.session, id, options);
    await ledger.hold();
    try {
      const events = fresh ? [] : await attempts.readStream(ledger.stream);
      const manager = events.length ? ledger.restore(events, cwd) : (fresh ?? SessionManager.inMemory(cwd, { id }));
      ledger.attach(manager);
      if (!events.length) ledger.queueHeader();
      ledger.enqueue(() => [
        { type: "mutation", agent: ledger.agent, run_id: ledger.stream.name, kind: "run.started", capabilities: CAPABILITIES, pi_session: id },
      ]);
      await ledger.flush();
    } catch (err) {
      await ledger.letGo();
      throw err;
    }
    return ledger;
  }

  /** Pi's own session manager, its entries kept in the ledger: give it to `createAgentSession`. */
  get sessionManager(): SessionManager {
    if (this.manager === undefined) throw new LedgerError("the Pi session is not open yet");
    return this.manager;
  }

  /** The Pi session's id (its stream is `pi.<id>`). */
  get piSession(): string {
    return this.sessionManager.getSessionId();
  }

  get streamName(): string {
    return this.stream.name;
  }

  // -- loading --------------------------------------------------------------------------------

  /** Pi's manager for the session the stream holds, as Pi restores one held elsewhere. */
  private restore(events: RecordedEvent[], cwd: string): SessionManager {
    const fold = foldSession(events);
    if (fold.header === undefined) throw new LedgerError(`stream ${this.stream.name} holds no Pi session header`);
    // Pi migrates an older session's entries as it loads them, as it does an older file.
    const manager = SessionManager.inMemory(cwd, undefined, [fold.header, ...fold.entries]);
    if (fold.leafMoved) {
      if (fold.leaf === null) manager.resetLeaf();
      else manager.branch(fold.leaf);
    }
    this.version = events[events.length - 1]?.version ?? 0;
    for (const event of events) {
      const f = event.fields;
      if (f["type"] === "tool_call") this.recorded.requested.set(String(f["attempt_id"]), String(f["event_id"]));
      if (f["type"] === "tool_result") this.recorded.resulted.add(String(f["attempt_id"]));
    }
    return manager;
  }

  /**
   * Pi's persistence replaced by the ledger's: each entry, leaf move and new session appended.
   * Once a write failed, `_persist` throws, and Pi keeps the entry out of its tree (it does so for
   * a file it could not write), so that memory never runs ahead of the ledger unnoticed.
   */
  private attach(manager: SessionManager): void {
    this.manager = manager;
    manager._persist = (entry: SessionEntry) => {
      if (this.failed !== undefined) throw this.failed;
      this.enqueue(() => this.entryEvents(entry));
    };
    const branch = manager.branch.bind(manager);
    manager.branch = (id: string) => {
      branch(id);
      this.enqueue(() => [this.native(LEAF, { leaf_id: id })]);
    };
    const resetLeaf = manager.resetLeaf.bind(manager);
    manager.resetLeaf = () => {
      resetLeaf();
      this.enqueue(() => [this.native(LEAF, { leaf_id: null })]);
    };
    const newSession = manager.newSession.bind(manager);
    manager.newSession = (options) => {
      const file = newSession(options);
      this.switchTo();
      return file;
    };
    const branched = manager.createBranchedSession.bind(manager);
    manager.createBranchedSession = (leafId: string) => {
      const file = branched(leafId);
      this.switchTo(true);
      return file;
    };
  }

  /** The manager moved to another Pi session: its own stream, header (and entries) first. */
  private switchTo(withEntries = false): void {
    const stream = streamId(this.session, `pi.${this.sessionManager.getSessionId()}`);
    this.enqueue(() => {
      this.stream = stream;
      this.version = 0;
      return undefined;
    });
    this.queueHeader(); // its failure, like any append's, is thrown by the next flush
    if (withEntries) {
      for (const entry of this.sessionManager.getEntries()) this.enqueue(() => this.entryEvents(entry));
    }
  }

  private queueHeader(): void {
    const header = this.sessionManager.getHeader();
    if (header) this.enqueue(() => [this.native(HEADER, { header: plain(header) })]);
  }

  /**
   * Hold the session's lease while it is open, renewed as it runs. A renewal refused means the
   * holding is over (for good: a new one would draw a new token); renewing stops, and the next
   * write is refused by its fence, which tells whether another process took the session over.
   */
  private async hold(): Promise<void> {
    this.leaseName = `run-${this.stream.name}`;
    const token = await this.store.lease("acquire", this.session, this.leaseName, this.owner, this.leaseTtlMs);
    if (!token) throw new LedgerError(`Pi session ${this.stream.name.slice(3)} is open in another live process`);
    this.fence = { lease: this.leaseName, owner: this.owner, token };
    this.renewer = setInterval(() => {
      void this.store.lease("renew", this.session, this.leaseName, this.owner, this.leaseTtlMs).then(
        (held) => {
          if (!held) clearInterval(this.renewer);
        },
        () => undefined, // Redis away for a moment: the next renewal tries again
      );
    }, this.leaseTtlMs / 3);
    this.renewer.unref();
  }

  private async letGo(): Promise<void> {
    if (this.renewer) clearInterval(this.renewer);
    await this.store.lease("release", this.session, this.leaseName, this.owner, 0).catch(() => false);
  }

  private taken(why: string, cause?: unknown): PiSessionTaken {
    return new PiSessionTaken(
      `Pi session ${this.stream.name.slice(3)} was taken over by another process (${why}): nothing more is written from this one; open it again to go on from what the ledger holds`,
      cause === undefined ? undefined : { cause },
    );
  }

  /** What the store's refusal of an append under the lease means to the user, in one line. */
  private lost(err: LeaseLost): PiSessionTaken {
    const mine = this.fence?.token ?? 0;
    if (err.token > mine) {
      return this.taken(`its lease lapsed and another process took it: token ${err.token} after this one's ${mine}`, err);
    }
    return new PiSessionTaken(
      `Pi session ${this.stream.name.slice(3)} lost its lease: it expired (this process was stopped or cut off past its ${this.leaseTtlMs} ms) and no other process holds it; this write was not stored, and nothing more is written from this one; open it again to go on from what the ledger holds`,
      { cause: err },
    );
  }

  // -- writing --------------------------------------------------------------------------------

  private native(kind: string, fields: Fields): Fields {
    return { type: "mutation", agent: this.agent, kind, ...fields };
  }

  /** The events of one Pi entry: its native record, then what it says, normalized. */
  private entryEvents(entry: SessionEntry): Fields[] {
    return [this.native(ENTRY, { entry: plain(entry) }), ...normalized(entry, this.agent, this.stream, this.recorded)];
  }

  private resultEvent(id: string, tool: string, isError: boolean, content: unknown, details: unknown): Fields {
    return toolResult(this.agent, this.stream.name, id, tool, isError, content, details, this.recorded);
  }

  /**
   * Queue an append (`make()` gives its events when its turn comes, undefined for none): the
   * appends of one Pi session go one after another, each at the version the last one left.
   */
  private enqueue(make: () => Fields[] | undefined): void {
    this.queue = this.queue.then(async () => {
      if (this.failed !== undefined) return;
      const events = make();
      if (events === undefined) return;
      try {
        await this.append(events);
      } catch (err) {
        this.failed = err instanceof Error ? err : new Error(String(err));
      }
    });
  }

  private async append(events: Fields[]): Promise<void> {
    for (let tries = 0; ; tries++) {
      // This writer's own (the owner): another process that took the session over writes at the
      // same versions, and its appends are not this one's retries.
      const appendId = `${this.stream.name}:${this.owner}:${this.version + 1}`;
      try {
        const result = await this.store.append(this.stream, this.version, appendId, events, { fence: this.fence });
        this.version = result.lastVersion;
        return;
      } catch (err) {
        // Refused before any version check: this process's hold is over, never a conflict to retry.
        if (err instanceof LeaseLost) throw this.lost(err);
        // Another writer appended to the stream (an operator's resolution): take it in, go on.
        if (!(err instanceof VersionConflict) || tries > 3) throw err;
        for (const event of await this.store.readStream(this.stream, { after: this.version })) {
          if (event.fields["type"] === "tool_result") this.recorded.resulted.add(String(event.fields["attempt_id"]));
          if (event.fields["type"] === "mutation" && [ENTRY, HEADER, LEAF].includes(String(event.fields["kind"]))) {
            throw this.taken(`the stream is at version ${err.actual}, with entries this one did not write`);
          }
        }
        this.version = err.actual;
      }
    }
  }

  /** Wait until everything the manager handed over is in the ledger; the first failure, thrown. */
  async flush(): Promise<void> {
    await this.queue;
    if (this.failed !== undefined) throw this.failed;
  }

  // -- tools ----------------------------------------------------------------------------------

  /**
   * The idempotency key of a tool call of this session (spec 7.1: the Pi session's run and the
   * call's id), the same for every attempt at it: what a tool hands the system it acts on, by
   * the `toolCallId` Pi gives its `execute`. Recorded on the call's `tool_call`.
   */
  keyOf(toolCallId: string): string {
    return idempotencyKey(this.stream.sessionId, this.stream.name, toolCallId);
  }

  /**
   * Pi tools whose `execute` runs with its call as `currentCall()` (its idempotency key among
   * it), as the recorder's tools run: give Pi these instead of the tools themselves.
   */
  recordTools<T extends ToolDefinition>(tools: readonly T[]): T[] {
    return tools.map((tool) => {
      const execute = tool.execute.bind(tool) as (...args: Parameters<T["execute"]>) => ReturnType<T["execute"]>;
      const recorded = (...args: Parameters<T["execute"]>): ReturnType<T["execute"]> => {
        const [toolCallId, params] = args as unknown as [string, unknown];
        return calling(this.callOf(toolCallId, tool.name, params), () => execute(...args));
      };
      return { ...tool, execute: recorded };
    });
  }

  /** A tool call of this session as its tool sees it (`currentCall()` inside `recordTools`'s tools). */
  callOf(toolCallId: string, tool: string, args: unknown): CurrentCall {
    const plainArgs = typeof args === "object" && args !== null && !Array.isArray(args) ? (args as Record<string, unknown>) : {};
    return { tool, sessionId: this.stream.sessionId, runId: this.stream.name, stepId: toolCallId, attemptId: toolCallId, idempotencyKey: this.keyOf(toolCallId), args: plainArgs };
  }

  /**
   * Pi's hooks, as an extension (give it to Pi's resource loader as an extension factory): a
   * tool runs only once its request is committed, and its outcome is recorded before Pi goes on.
   */
  get extension(): ExtensionFactory {
    return (pi: ExtensionAPI) => {
      pi.on("tool_call", async (event) => {
        try {
          await this.flush(); // the assistant message with this call, committed
          if (!this.recorded.requested.has(event.toolCallId)) {
            const eventId = `${this.stream.name}/hook/${event.toolCallId}`;
            this.recorded.requested.set(event.toolCallId, eventId);
            // A call another tool made is a child of that tool's call.
            const parent = event.parentToolCallId === undefined ? undefined : this.recorded.requested.get(event.parentToolCallId);
            this.enqueue(() => [
              {
                type: "tool_call", agent: this.agent, tool: event.toolName, args: plain(event.input), attempt_id: event.toolCallId, event_id: eventId, run_id: this.stream.name,
                idempotency_key: this.keyOf(event.toolCallId),
                ...(parent === undefined ? {} : { parents: [parent] }),
              },
            ]);
            await this.flush();
          }
        } catch (err) {
          return { block: true, reason: `not run: its request could not be recorded in the ledger (${String(err)})` };
        }
        return undefined;
      });
      pi.on("tool_result", async (event) => {
        if (!this.recorded.resulted.has(event.toolCallId)) {
          this.recorded.resulted.add(event.toolCallId);
          this.enqueue(() => [this.resultEvent(event.toolCallId, event.toolName, event.isError, event.content, event.details)]);
        }
        await this.flush();
        return undefined;
      });
    };
  }

  /**
   * Complete the tool calls a crash left without a result on the active branch: one whose
   * outcome the ledger holds gets it as its tool result (the tool is not run again); one of a
   * tool safe to replay is closed as abandoned and its result says so, for the model to call it
   * again; any other stops here (UnresolvedAttempt) for a decision (`ledger-bus resolve`).
   * Returns the ids of the calls completed. Then the agent may continue.
   */
  async resume(): Promise<string[]> {
    await this.flush();
    const answered = new Set<string>();
    const dangling: { id: string; name: string }[] = [];
    for (const entry of this.sessionManager.getBranch()) {
      if (entry.type !== "message") continue;
      const message = entry.message as unknown as Json;
      if (message["role"] === "toolResult") answered.add(String(message["toolCallId"]));
      if (message["role"] === "assistant") {
        for (const block of (message["content"] ?? []) as Json[]) {
          if (block["type"] === "toolCall") dangling.push({ id: String(block["id"]), name: String(block["name"]) });
        }
      }
    }
    const open = dangling.filter((call) => !answered.has(call.id));
    if (!open.length) return [];
    const { results: outcomes, tools } = await this.outcomes(new Set(open.map((call) => call.id)));
    const done: string[] = [];
    for (const call of open) {
      const outcome = outcomes.get(call.id);
      let isError: boolean;
      let content: { type: "text"; text: string }[];
      let details: unknown = undefined;
      if (outcome !== undefined) {
        isError = outcome.fields["status"] === "error";
        const result = outcome.fields["result"] as Json | null;
        if (result !== null && typeof result === "object" && Array.isArray(result["content"]) && "details" in result) {
          content = result["content"] as { type: "text"; text: string }[]; // recorded by the hook
          details = result["details"] ?? undefined;
        } else {
          content = [{ type: "text", text: JSON.stringify(result) }]; // given by an operator
        }
      } else if (this.safe.has(call.name)) {
        isError = true;
        content = [{ type: "text", text: "interrupted by a crash: it is not known whether it ran; it is safe to run again" }];
        this.enqueue(() => [
          { ...this.resultEvent(call.id, call.name, true, content, null), result: { outcome: "unknown", reason: "abandoned by a crash; replayed on resume" } },
        ]);
      } else {
        throw new UnresolvedAttempt(call.id, call.name);
      }
      this.recorded.resulted.add(call.id);
      this.closeNested(call.id, tools);
      const message = { role: "toolResult", toolCallId: call.id, toolName: call.name, content, details, isError, timestamp: Date.now() };
      this.sessionManager.appendMessage(message as never);
      done.push(call.id);
    }
    await this.flush();
    return done;
  }

  /**
   * The calls a completed call had made and the crash left open (`<id>/<n>`, nested through
   * `executeTool`): closed with an unknown outcome, since the call's own outcome stands for
   * them, and the transcript never showed them for the model to run again.
   */
  private closeNested(id: string, tools: Map<string, string>): void {
    for (const nested of this.recorded.requested.keys()) {
      if (!nested.startsWith(`${id}/`) || this.recorded.resulted.has(nested)) continue;
      this.recorded.resulted.add(nested);
      this.enqueue(() => [
        {
          ...this.resultEvent(nested, tools.get(nested) ?? "unknown", true, [], null),
          result: { outcome: "unknown", reason: `interrupted by a crash; its parent call ${id} was completed on resume` },
        },
      ]);
    }
  }

  /**
   * What the ledger holds of these calls and of the calls they made: each one's tool_result,
   * whoever wrote it (the hook, or an operator's resolution), and the tool of each request.
   */
  private async outcomes(ids: Set<string>): Promise<{ results: Map<string, RecordedEvent>; tools: Map<string, string> }> {
    const results = new Map<string, RecordedEvent>();
    const tools = new Map<string, string>();
    for (const event of await this.store.readStream(this.stream)) {
      const f = event.fields;
      const id = String(f["attempt_id"]);
      if (f["type"] === "tool_result" && ids.has(id)) results.set(id, event);
      if (f["type"] === "tool_call") tools.set(id, String(f["tool"]));
    }
    return { results, tools };
  }

  /** Flush, record the end of the run, and let the lease go. */
  async close(): Promise<void> {
    try {
      this.enqueue(() => [
        { type: "mutation", agent: this.agent, run_id: this.stream.name, kind: "run.finished", status: "ok" },
      ]);
      await this.flush();
    } finally {
      await this.letGo();
    }
  }

  // -- session files --------------------------------------------------------------------------

  /** Import a Pi session file (JSONL) into the ledger session; the Pi session's id. */
  static async importFile(store: Log, session: string, path: string, agent = AGENT): Promise<string> {
    const entries = parseSessionEntries(await readFile(path, "utf8"));
    const header = entries.find((e): e is SessionHeader => e.type === "session");
    if (!header) throw new LedgerError(`${path} is not a Pi session file: it has no session header`);
    const ledger = new ImportWriter(store, streamId(session, `pi.${header.id}`), agent);
    await ledger.write(entries);
    return header.id;
  }

  /** Write a Pi session of the ledger back as Pi's session file, line for line as imported. */
  static async exportFile(store: Log, session: string, piSession: string, path: string): Promise<void> {
    const fold = foldSession(await store.readStream(streamId(session, `pi.${piSession}`)));
    if (fold.header === undefined) throw new LedgerError(`no Pi session ${piSession} in session ${session}`);
    const lines = [fold.header, ...fold.entries].map((entry) => JSON.stringify(entry));
    await writeFile(path, `${lines.join("\n")}\n`);
  }
}

/** A tool's outcome, as Pi gives it (its content and details), paired with its request. */
function toolResult(agent: string, runId: string, id: string, tool: string, isError: boolean, content: unknown, details: unknown, recorded: Recorded): Fields {
  const call = recorded.requested.get(id);
  return {
    type: "tool_result",
    agent,
    tool,
    attempt_id: id,
    status: isError ? "error" : "ok",
    result: plain({ content: content ?? [], details: details ?? null }),
    run_id: runId,
    ...(call ? { parents: [call] } : {}),
  };
}

/** The calls of a Pi session recorded so far, by tool call id: the event id of each request. */
export interface Recorded {
  requested: Map<string, string>;
  resulted: Set<string>;
}

/**
 * What a Pi entry says, as normalized events, as the Python adapters write a framework's
 * messages (ledger_bus/adapters/langgraph/normalize.py): a user message is a `message` of agent
 * `user`; an assistant message is the model call that made it (a `tool_call` and `tool_result`
 * of the tool `model`, the result holding the model, its token usage and cost, why it stopped
 * and the tool calls it asked for), the `message`, and a requested `tool_call` per tool call
 * (attempt_id: the call's id); a tool result, the `tool_result` of its call. Event ids are the
 * entry's (`<run>/<entry id>/<part>`), so that parents name them before they are written; each
 * call is one attempt, whichever side (an entry or a hook, `recorded`) writes it first.
 */
export function normalized(entry: SessionEntry, agent: string, stream: StreamId, recorded: Recorded): Fields[] {
  const runId = stream.name;
  // Model calls that made no message: a `usage` entry's (a cache warming, say), and the summary
  // behind a compaction or a branch summary.
  if (entry.type === "usage") {
    const purpose = { purpose: entry.kind };
    return modelCall(entry, agent, runId, { model: entry.model, provider: entry.provider, usage: entry.usage, args: purpose, result: purpose });
  }
  if ((entry.type === "compaction" || entry.type === "branch_summary") && entry.usage !== undefined) {
    const purpose = { purpose: entry.type };
    return modelCall(entry, agent, runId, { model: null, provider: null, usage: entry.usage, args: purpose, result: purpose });
  }
  if (entry.type !== "message") return [];
  const message = entry.message as unknown as Json;
  const base = `${runId}/${entry.id}`;
  const ids = { run_id: runId, step_id: entry.id };
  const events: Fields[] = [];
  switch (message["role"]) {
    case "user":
      events.push({ type: "message", agent: "user", body: textOf(message["content"]), event_id: `${base}/said`, ...ids });
      break;
    case "assistant": {
      const blocks = ((message["content"] ?? []) as Json[]).filter((block) => block["type"] === "toolCall");
      const call = `${base}/model`;
      const said = `${base}/said`;
      events.push(
        ...modelCall(entry, agent, runId, {
          model: typeof message["model"] === "string" ? message["model"] : null,
          provider: (message["provider"] as string | undefined) ?? null,
          usage: message["usage"],
          failed: message["stopReason"] === "error",
          result: {
            finish_reason: message["stopReason"] ?? null,
            tool_calls: blocks.map((block) => String(block["id"])),
            ...(message["errorMessage"] ? { error: message["errorMessage"] } : {}),
          },
        }),
      );
      events.push({ type: "message", agent, body: textOf(message["content"]), event_id: said, parents: [call], ...ids });
      for (const block of blocks) {
        const id = String(block["id"]);
        if (recorded.requested.has(id)) continue;
        const eventId = `${base}/call/${id}`;
        recorded.requested.set(id, eventId);
        events.push({
          type: "tool_call",
          agent,
          tool: String(block["name"]),
          args: plain((block["arguments"] ?? {}) as Json),
          attempt_id: id,
          idempotency_key: idempotencyKey(stream.sessionId, runId, id),
          event_id: eventId,
          parents: [said],
          ...ids,
        });
      }
      break;
    }
    case "toolResult": {
      const id = String(message["toolCallId"]);
      if (!recorded.resulted.has(id)) {
        recorded.resulted.add(id);
        const event = toolResult(agent, runId, id, String(message["toolName"]), Boolean(message["isError"]), message["content"], message["details"], recorded);
        events.push({ ...event, step_id: entry.id });
      }
      break;
    }
  }
  return events;
}

/** Pi's usage as the ledger's model results carry it: tokens, and the cost in dollars. */
function tokens(usage: Json): Fields {
  return {
    usage: {
      input_tokens: usage["input"] ?? 0,
      output_tokens: usage["output"] ?? 0,
      input_token_details: { cache_read: usage["cacheRead"] ?? 0 },
    },
    cost_usd: ((usage["cost"] ?? {}) as Json)["total"] ?? 0,
  };
}

/** The model call an entry stands for: its request, and its result (the model, its usage and
 * cost, and what `call.result` adds: why it stopped, the calls it asked for, its purpose). */
function modelCall(
  entry: SessionEntry,
  agent: string,
  runId: string,
  call: { model: string | null; provider: string | null; usage: unknown; failed?: boolean; args?: Fields; result: Fields },
): Fields[] {
  const base = `${runId}/${entry.id}`;
  const ids = { run_id: runId, step_id: entry.id };
  const attempt = `model:${entry.id}`;
  return [
    { type: "tool_call", agent, tool: "model", attempt_id: attempt, args: { ...(call.model ? { model: call.model } : {}), ...call.args }, event_id: `${base}/model`, ...ids },
    {
      type: "tool_result",
      agent,
      tool: "model",
      attempt_id: attempt,
      status: call.failed ? "error" : "ok",
      result: plain({ model: call.model, provider: call.provider, ...tokens((call.usage ?? {}) as Json), ...call.result }),
      event_id: `${base}/cost`,
      parents: [`${base}/model`],
      ...ids,
    },
  ];
}

/** A Pi session's stream folded: its header, its entries in order, the active leaf. */
export function foldSession(events: RecordedEvent[]): {
  header: SessionHeader | undefined;
  entries: SessionEntry[];
  /** The active leaf: null where Pi's own leaf is null (reset to before the first entry). */
  leaf: string | null;
  leafMoved: boolean;
} {
  let header: SessionHeader | undefined;
  const entries: SessionEntry[] = [];
  let leaf: string | null = null;
  let leafMoved = false;
  for (const event of events) {
    const f = event.fields;
    if (f["type"] !== "mutation") continue;
    if (f["kind"] === HEADER) header = f["header"] as SessionHeader;
    else if (f["kind"] === ENTRY) {
      const entry = f["entry"] as SessionEntry;
      entries.push(entry);
      leaf = entry.id;
      leafMoved = false;
    } else if (f["kind"] === LEAF) {
      leaf = (f["leaf_id"] as string | null) ?? null;
      leafMoved = true;
    }
  }
  return { header, entries, leaf, leafMoved };
}

/** Appends a session file's entries, as the session manager would have, a batch at a time. */
class ImportWriter {
  constructor(
    private readonly store: Log,
    private readonly stream: StreamId,
    private readonly agent: string,
  ) {}

  async write(entries: FileEntry[]): Promise<void> {
    if (await this.store.streamVersion(this.stream)) {
      throw new LedgerError(`the ledger holds Pi session ${this.stream.name.slice(3)} already`);
    }
    const events: Fields[] = [];
    const recorded: Recorded = { requested: new Map(), resulted: new Set() };
    for (const entry of entries) {
      if (entry.type === "session") {
        events.push({ type: "mutation", agent: this.agent, kind: HEADER, header: entry });
      } else {
        events.push({ type: "mutation", agent: this.agent, kind: ENTRY, entry });
        events.push(...normalized(entry, this.agent, this.stream, recorded));
      }
    }
    let version = 0;
    for (let at = 0; at < events.length; at += 100) {
      const batch = events.slice(at, at + 100);
      const result = await this.store.append(this.stream, version, `${this.stream.name}:import:${at}`, batch);
      version = result.lastVersion;
    }
  }
}
