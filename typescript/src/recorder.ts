/**
 * What an agent loop calls to record its work: runs, tool calls, messages, state, delegation
 * (the Python package's ledger_bus/agent/recorder.py, writing the same events to the same streams, so
 * that the Python reconciler and `ledger-bus resolve` work on a Node run as on a Python one).
 *
 * - requested before called: a tool's `tool_call` is committed before the tool runs, and when
 *   that write fails the tool does not run (RequestNotRecorded);
 * - outcomes: the `tool_result` (ok, or error with the exception) follows, linked to its call;
 * - liveness: a run holds a lease, renewed in the background, so a crashed run is recognisable;
 *   every write names the lease's holding (a fence), so a run that lost its lease (stopped past
 *   it, cut off) writes nothing more: LeaseLost, and the run is lost;
 * - recovery: a run resumed from its stream returns recorded results instead of calling again,
 *   and stops at a call that was requested and never finished unless the tool is safe to replay.
 *
 * Each run writes its own stream (`run-<runId>`) with expected versions: one writer per stream.
 */

import { randomUUID } from "node:crypto";

import {
  abandonedEvent,
  type Attempt,
  type Capabilities,
  DEFAULT_LEASE_MS,
  type Delegation,
  failure,
  isAbandoned,
  isNotDone,
  OutcomeNotRecorded,
  requestEvent,
  RequestNotRecorded,
  resultEvent,
  ToolFailed,
  UnresolvedAttempt,
} from "./calls.js";
import { calling, type CurrentCall } from "./current.js";
import { canonicalText, type Json } from "./model/canonical.js";
import { DurabilityNotConfirmed, HistoryRewound, LeaseLost, LedgerError } from "./model/errors.js";
import type { Fence } from "./model/fences.js";
import { ANY, deriveEventId, streamId, type StreamId, streamText } from "./model/ids.js";
import { idempotencyKey } from "./model/keys.js";
import type { AppendResult, RecordedEvent } from "./model/records.js";
import { type Attempts, type Log, need } from "./store/capabilities.js";

/** What a run writes of its own life, each time it starts or ends: never replayed. */
export const LIFECYCLE = new Set(["run.started", "run.resumed", "run.finished", "tool.declared"]);
// What the ledger sets on an event, or the run itself: not what the agent said.
const NOT_SAID = new Set(["event_id", "agent", "run_id", "parents"]);
const RUN_AGAIN = Symbol("run again");

/** What an event says, as canonical text: compared whatever the order its fields were given in. */
function said(fields: Record<string, unknown>): string {
  return canonicalText(Object.fromEntries(Object.entries(fields).filter(([k]) => !NOT_SAID.has(k))) as Json);
}

const shortId = (): string => randomUUID().replaceAll("-", "").slice(0, 12);
const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/** What a loop rebuilds its state from after a crash: the newest snapshot and the events after it. */
export interface Recovery {
  /** The newest snapshot's state; undefined when the run took none. */
  state: Record<string, unknown> | undefined;
  events: RecordedEvent[];
}

interface History {
  version: number;
  attempts: Map<string, RecordedEvent[]>; // step -> tool_calls
  results: Map<string, RecordedEvent>; // attempt -> tool_result
  said: RecordedEvent[]; // messages and mutations, in order
  checkpoint: Record<string, unknown> | undefined;
  checkpointVersion: number;
  events: RecordedEvent[];
}

const emptyHistory = (): History => ({
  version: 0,
  attempts: new Map(),
  results: new Map(),
  said: [],
  checkpoint: undefined,
  checkpointVersion: 0,
  events: [],
});

export interface RecorderOptions {
  /** false for telemetry only: writes that fail are let go, and no recovery is claimed. */
  durable?: boolean;
  /** How long a run stays alive without renewal; renewed every third of it. */
  leaseTtlMs?: number;
}

export interface RunOptions {
  runId?: string;
  parents?: string[];
  /** Continue the run's stream: recorded results are returned instead of calling tools again. */
  resume?: boolean;
  /** Wait this long for a crashed holder's lease to expire. */
  leaseWaitMs?: number;
  /** The run's version as last seen acknowledged; a resume that finds less raises HistoryRewound. */
  acknowledged?: number;
  /** More fields of the run's run.started (or run.resumed). */
  fields?: Record<string, unknown>;
}

export interface CallOptions {
  /** Whether running it twice is harmless; recovery re-runs only these. */
  safeToReplay?: boolean;
  /** The logical step this call belongs to; by default the run's n-th call. */
  step?: string;
}

/**
 * Records runs of one agent in one session. The store must have leases and open attempts (the
 * "attempts" capability) besides its log: Unsupported when it has not.
 */
export class Recorder {
  readonly store: Log & Attempts;
  readonly durable: boolean;
  readonly leaseTtlMs: number;

  constructor(
    store: Log,
    readonly sessionId: string,
    readonly agent: string,
    options: RecorderOptions = {},
  ) {
    this.store = need(store, "attempts");
    this.durable = options.durable ?? true;
    this.leaseTtlMs = options.leaseTtlMs ?? DEFAULT_LEASE_MS;
  }

  get capabilities(): Capabilities {
    return this.durable
      ? { profile: "typescript-loop", request_before_call: "strict", record_outcome: "strict", recovery: "strict" }
      : { profile: "typescript-loop", request_before_call: "best_effort", record_outcome: "best_effort", recovery: "unsupported" };
  }

  /** A run, started: its lease taken, its start recorded. End it with `finish()`. */
  async start(options: RunOptions = {}): Promise<Run> {
    if (options.resume && !this.durable) {
      throw new LedgerError("a telemetry-only recorder cannot resume: it claims no recovery");
    }
    const run = new Run(this, options);
    await run.begin();
    return run;
  }

  /** `work(run)` inside a run: started before, finished after (ok, or error with what it threw). */
  async within<T>(options: RunOptions, work: (run: Run) => Promise<T>): Promise<T> {
    const run = await this.start(options);
    let value: T;
    try {
      value = await work(run);
    } catch (err) {
      await run.finish(err);
      throw err;
    }
    await run.finish();
    return value;
  }

  /** The newest snapshot of run `runId` and the events after it, read without its lease. */
  async recover(runId: string): Promise<Recovery> {
    const run = new Run(this, { runId, resume: true });
    await run.load();
    return run.recovered;
  }
}

/** One semantic execution by an agent; its events go to the stream `run-<runId>`. */
export class Run {
  readonly runId: string;
  readonly stream: StreamId;
  readonly native: StreamId;
  /** The run's stream version: what it last wrote, or found. */
  version: number;
  private readonly parents: string[];
  private readonly resume: boolean;
  private readonly leaseWaitMs: number;
  private readonly fields: Record<string, unknown>;
  private readonly owner = randomUUID().replaceAll("-", "");
  // The run's lease as this execution holds it, once taken: every write names it, so a write
  // made after the holding is over (a process stopped past its TTL) is refused, not landed.
  private fence: Fence | undefined;
  private history = emptyHistory();
  private calls = 0;
  private saidCount = 0;
  private checkpoints = 0;
  private readonly declared = new Set<string>();
  private lost = false;
  private renewer: NodeJS.Timeout | undefined;
  // The version of this incarnation's run.started: 1 for a run id used once. Attempt ids of a
  // later incarnation carry it, so that no attempt id is recorded twice in a stream.
  private incarnation = 1;

  constructor(
    readonly recorder: Recorder,
    options: RunOptions,
  ) {
    this.runId = options.runId ?? shortId();
    this.stream = streamId(recorder.sessionId, `run-${this.runId}`);
    this.native = streamId(recorder.sessionId, `native-${this.runId}`);
    this.parents = options.parents ?? [];
    this.resume = options.resume ?? false;
    this.leaseWaitMs = options.leaseWaitMs ?? 0;
    this.fields = options.fields ?? {};
    this.version = options.acknowledged ?? 0;
  }

  get leaseName(): string {
    return `run-${this.runId}`;
  }

  private get store(): Log & Attempts {
    return this.recorder.store;
  }

  /** Take the lease (waiting up to leaseWaitMs for a crashed holder's), keep it, record the start. */
  async begin(): Promise<void> {
    const { sessionId, leaseTtlMs: ttl } = this.recorder;
    const deadline = Date.now() + this.leaseWaitMs;
    let token: number;
    while (!(token = await this.store.lease("acquire", sessionId, this.leaseName, this.owner, ttl))) {
      if (Date.now() >= deadline) throw new LedgerError(`run ${this.runId} is held by another live process`);
      await sleep(Math.min(200, ttl / 5));
    }
    this.fence = { lease: this.leaseName, owner: this.owner, token };
    this.renewer = setInterval(() => void this.renew(), ttl / 3);
    this.renewer.unref();
    try {
      if (this.resume) {
        await this.load();
      } else {
        this.version = await this.store.streamVersion(this.stream);
        this.incarnation = this.version + 1; // the version its run.started will take
      }
      await this.write(
        {
          type: "mutation",
          kind: this.resume ? "run.resumed" : "run.started",
          capabilities: this.recorder.capabilities,
          ...this.fields,
        },
        this.parents,
      );
    } catch (err) {
      await this.letGo();
      throw err;
    }
  }

  /** Record how the run ended (not after its lease was lost: it may not write then), and let the lease go. */
  async finish(err?: unknown): Promise<void> {
    try {
      if (!(err instanceof LeaseLost) && !this.lost) {
        const extra = err === undefined ? {} : { error: `${failure(err).error}: ${failure(err).message}` };
        await this.write({ type: "mutation", kind: "run.finished", status: err === undefined ? "ok" : "error", ...extra });
      }
    } finally {
      await this.letGo();
    }
  }

  /**
   * Stop renewing the lease and leave it to expire, writing nothing: the run as a killed process
   * leaves it, its open call for the reconciler to flag (tests use it for a crash in-process).
   */
  drop(): void {
    this.lose();
  }

  /** The holding is over: no more renewals, and no more writes from this execution. */
  private lose(): void {
    if (this.renewer) clearInterval(this.renewer);
    this.renewer = undefined;
    this.lost = true;
  }

  private async renew(): Promise<void> {
    try {
      const token = await this.store.lease("renew", this.recorder.sessionId, this.leaseName, this.owner, this.recorder.leaseTtlMs);
      if (!token) this.lose();
    } catch {
      // could not reach the store: tried again at the next renewal
    }
  }

  private async letGo(): Promise<void> {
    if (this.renewer) clearInterval(this.renewer);
    this.renewer = undefined;
    await this.store.lease("release", this.recorder.sessionId, this.leaseName, this.owner, 0).catch(() => false);
  }

  // -- writing --------------------------------------------------------------------------------

  /** Append one event to the run's stream; its event id. */
  async write(event: Record<string, unknown>, parents: string[] = []): Promise<string> {
    if (this.lost) throw new LeaseLost(`run ${this.runId} lost its lease; it may not write any more`);
    const full: Record<string, unknown> = { agent: this.recorder.agent, run_id: this.runId, ...event };
    if (parents.length) full["parents"] = parents;
    const appendId = `${this.runId}:${this.version + 1}`;
    // Known before the write: the ledger derives it from the append.
    const eventId = (full["event_id"] as string | undefined) ?? deriveEventId(this.recorder.sessionId, this.stream.name, appendId, 0);
    let result: AppendResult;
    try {
      result = await this.store.append(this.stream, this.version, appendId, [full], { fence: this.fence });
    } catch (caught) {
      // Whatever else this execution had queued is refused too, telemetry or not.
      const err = this.lostFrom(caught);
      if (err instanceof LeaseLost) throw err;
      if (err instanceof DurabilityNotConfirmed) {
        // The primary has it: the run's next event follows it, whatever becomes of this one.
        this.version = (err.result as AppendResult).lastVersion;
        if (this.recorder.durable) throw err;
        return eventId;
      }
      if (err instanceof LedgerError && !this.recorder.durable) return eventId;
      throw err;
    }
    this.version = result.lastVersion;
    return eventId;
  }

  /** Record that this agent said something; its event id. */
  async message(body: string, ids: Record<string, unknown> = {}): Promise<string> {
    return this.say({ type: "message", body, ...ids });
  }

  /** Record a change of session state. */
  async mutate(kind: string, fields: Record<string, unknown> = {}): Promise<string> {
    return this.say({ type: "mutation", kind, ...fields });
  }

  /**
   * The run's next message or mutation, unless it is a resumed run's replay of one: the n-th it
   * says is the n-th it said before the crash, and when that is recorded with the same content
   * its event id is returned and nothing written.
   */
  private async say(event: Record<string, unknown>): Promise<string> {
    const position = this.saidCount++;
    const before = this.history.said[position];
    if (before !== undefined && said(before.fields) === said(event)) return String(before.fields["event_id"]);
    return this.write(event);
  }

  /**
   * Keep the loop's state (JSON), whole, in the run's native stream: on resume, `recovered`
   * gives the newest snapshot and the events after it ("snapshot plus tail replay").
   */
  async snapshot(state: Record<string, unknown>): Promise<void> {
    this.checkpoints += 1;
    if (this.lost) throw new LeaseLost(`run ${this.runId} lost its lease; it may not write any more`);
    const appendId = `${this.runId}:native:${this.version}:${this.checkpoints}`;
    const event = { type: "mutation", agent: this.recorder.agent, run_id: this.runId, kind: "native.checkpoint", run_version: this.version, state };
    try {
      await this.store.append(this.native, ANY, appendId, [event], { fence: this.fence });
    } catch (err) {
      throw this.lostFrom(err);
    }
  }

  /**
   * A refused write as this execution raises it: LeaseLost marks the run lost (the store checks
   * the fence before anything else, so a write whose holding is over is always told so).
   */
  private lostFrom(err: unknown): unknown {
    if (err instanceof LeaseLost) this.lose();
    return err;
  }

  /** On resume: the newest snapshot and the events this run recorded after it. */
  get recovered(): Recovery {
    const history = this.history;
    return { state: history.checkpoint, events: history.events.filter((e) => e.version > history.checkpointVersion) };
  }

  // -- calls ----------------------------------------------------------------------------------

  /**
   * `fn(args)` as the tool `tool`, recorded: its request committed first, then its result. A
   * resumed run returns the recorded result of a step it did before (whoever recorded it: the
   * run, or an operator's `ledger-bus resolve`).
   */
  async call<T>(tool: string, args: Record<string, unknown>, fn: (args: Record<string, unknown>) => T | Promise<T>, options: CallOptions = {}): Promise<T> {
    const begun = await this.beginCall(tool, args, options);
    if (begun.done) return begun.value as T;
    let value: T;
    try {
      value = await calling(this.currentCall(begun.attempt), () => fn(args));
    } catch (err) {
      await this.endCall(begun.attempt, "error", failure(err));
      throw err;
    }
    await this.endCall(begun.attempt, "ok", value);
    return value;
  }

  /** Before a call: the recorded value of a step done before (resumed), else its committed Attempt. */
  async beginCall(tool: string, args: Record<string, unknown>, options: CallOptions = {}): Promise<{ done: true; value: unknown } | { done: false; attempt: Attempt }> {
    const safe = options.safeToReplay ?? false;
    this.calls += 1;
    const stepId = options.step ?? `${this.runId}/c${this.calls}`;
    const earlier = this.history.attempts.get(stepId) ?? [];
    if (earlier.length) {
      const replayed = await this.replay(stepId, earlier, safe);
      if (replayed !== RUN_AGAIN) return { done: true, value: replayed };
    }
    const attemptId = this.attemptId(stepId, earlier.length + 1);
    const key = idempotencyKey(this.recorder.sessionId, this.runId, stepId, this.incarnation);
    if (safe && !this.declared.has(tool)) {
      // Unsafe is the default; a tool safe to run twice says so once per run, before its first request.
      await this.write({ type: "mutation", kind: "tool.declared", tool, safe_to_replay: true });
      this.declared.add(tool);
    }
    let callId: string;
    try {
      callId = await this.write(requestEvent(tool, args, attemptId, stepId, key));
    } catch (err) {
      const why = err instanceof DurabilityNotConfirmed ? "written but not confirmed durable" : "not recorded";
      throw new RequestNotRecorded(`${tool} was not called: its request was ${why}: ${String(err)}`);
    }
    return { done: false, attempt: { tool, attemptId, stepId, callId, idempotencyKey: key, args } };
  }

  /** A begun call as its tool sees it (`currentCall()` while it runs). */
  currentCall(attempt: Attempt): CurrentCall {
    return {
      tool: attempt.tool,
      sessionId: this.recorder.sessionId,
      runId: this.runId,
      stepId: attempt.stepId,
      attemptId: attempt.attemptId,
      idempotencyKey: attempt.idempotencyKey ?? idempotencyKey(this.recorder.sessionId, this.runId, attempt.stepId, this.incarnation),
      args: attempt.args ?? {},
    };
  }

  /** After a call: its outcome. OutcomeNotRecorded: it could not be committed. */
  async endCall(attempt: Attempt, status: "ok" | "error", value: unknown): Promise<void> {
    try {
      await this.write(resultEvent(attempt.tool, attempt.attemptId, attempt.stepId, status, value), [attempt.callId]);
    } catch (err) {
      throw new OutcomeNotRecorded(`${attempt.tool} ran (attempt ${attempt.attemptId}) but its result was not recorded: ${String(err)}`);
    }
  }

  private attemptId(stepId: string, n: number): string {
    return this.incarnation === 1 ? `${stepId}#${n}` : `${stepId}#${n}@${this.incarnation}`;
  }

  private async replay(stepId: string, earlier: RecordedEvent[], safe: boolean): Promise<unknown> {
    for (const call of earlier) {
      const result = this.history.results.get(String(call.fields["attempt_id"]));
      if (result === undefined || isAbandoned(result) || isNotDone(result)) continue;
      if (result.fields["status"] === "ok") return result.fields["result"] ?? null;
      throw new ToolFailed(`${String(call.fields["tool"])} failed when first run: ${JSON.stringify(result.fields["result"] ?? null)}`);
    }
    const latest = earlier[earlier.length - 1] as RecordedEvent;
    // A probe found the last attempt's effect never took place: call again, safe to replay or
    // not; the key it carries again makes a late first attempt harmless.
    if (isNotDone(this.history.results.get(String(latest.fields["attempt_id"])))) return RUN_AGAIN;
    if (!safe) throw new UnresolvedAttempt(String(latest.fields["attempt_id"]), String(latest.fields["tool"]));
    // Safe to replay: close the abandoned attempt explicitly, then run a new one.
    if (!this.history.results.has(String(latest.fields["attempt_id"]))) {
      await this.write(abandonedEvent(latest, stepId), [String(latest.fields["event_id"])]);
    }
    return RUN_AGAIN;
  }

  /** Read the run's history, to resume from. */
  async load(): Promise<void> {
    const history = emptyHistory();
    for (const event of await this.store.readStream(this.stream)) {
      const f = event.fields;
      history.version = event.version;
      if (f["type"] === "mutation" && f["kind"] === "run.started") {
        // An earlier incarnation of this run id is another execution: not this one's to replay.
        history.attempts.clear();
        history.results.clear();
        history.said = [];
        history.events = [];
        this.incarnation = event.version;
      }
      const lifecycle = f["type"] === "mutation" && LIFECYCLE.has(String(f["kind"]));
      if (!lifecycle) history.events.push(event);
      if (f["type"] === "tool_call") {
        const step = String(f["step_id"]);
        history.attempts.set(step, [...(history.attempts.get(step) ?? []), event]);
      } else if (f["type"] === "tool_result") {
        history.results.set(String(f["attempt_id"]), event);
      } else if (!lifecycle) {
        history.said.push(event);
      }
    }
    // Only the last checkpoint counts; each holds a whole state.
    const last = await this.store.streamVersion(this.native);
    if (last) {
      const [checkpoint] = await this.store.readStream(this.native, { after: last - 1 });
      const takenAt = Number(checkpoint?.fields["run_version"] ?? 0);
      if (checkpoint && takenAt >= this.incarnation) {
        history.checkpoint = checkpoint.fields["state"] as Record<string, unknown>;
        history.checkpointVersion = takenAt;
      }
    }
    if (history.version < this.version) throw new HistoryRewound(streamText(this.stream), this.version, history.version);
    this.history = history;
    this.version = history.version;
  }

  // -- delegation -----------------------------------------------------------------------------

  /**
   * Ask another agent to do something: a `delegate` call whose child run links back to it. The
   * child, in any process and either language, starts run `childRunId` with parents
   * `[callEventId]`; `finishDelegation` records the outcome here.
   */
  async delegate(agent: string, objective: string, childRunId?: string): Promise<Delegation> {
    this.calls += 1;
    const stepId = `${this.runId}/c${this.calls}`;
    const attemptId = this.attemptId(stepId, 1);
    for (const earlier of this.history.attempts.get(stepId) ?? []) {
      if (earlier.fields["tool"] === "delegate") {
        const child = String((earlier.fields["args"] as Record<string, unknown>)["child_run"]);
        return { stepId, attemptId, childRunId: child, callEventId: String(earlier.fields["event_id"]), agent };
      }
    }
    const child = childRunId ?? shortId();
    const key = idempotencyKey(this.recorder.sessionId, this.runId, stepId, this.incarnation);
    const callId = await this.write(requestEvent("delegate", { agent, objective, child_run: child }, attemptId, stepId, key));
    return { stepId, attemptId, childRunId: child, callEventId: callId, agent };
  }

  async finishDelegation(delegation: Delegation, status: "ok" | "error", result: unknown): Promise<void> {
    if (this.history.results.has(delegation.attemptId)) return;
    await this.endCall({ tool: "delegate", attemptId: delegation.attemptId, stepId: delegation.stepId, callId: delegation.callEventId }, status, result);
  }
}
