// The recorder: a call's request committed before it runs, its result after; a run resumed
// returns recorded results and stops at a call requested and never finished; leases; snapshots.
import { describe, expect, it } from "vitest";

import {
  LeaseLost,
  LedgerError,
  Recorder,
  RequestNotRecorded,
  streamId,
  ToolFailed,
  UnresolvedAttempt,
  type EventStore,
} from "../src/index.js";
import { stores } from "./support/stores.js";

const { open } = stores(["memory", "redis"]);
const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

async function kinds(store: EventStore, session: string, stream: string): Promise<string[]> {
  return (await store.readStream(streamId(session, stream))).map((e) =>
    e.fields["type"] === "mutation" ? String(e.fields["kind"]) : String(e.fields["type"]),
  );
}

describe.each(["memory", "redis"] as const)("the recorder on %s", (kind) => {
  it("commits a call's request before the call runs, and its result after", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder");
    let seenWhileRunning: string[] = [];
    const value = await recorder.within({ runId: "r1" }, async (run) => {
      await run.message("looking");
      return run.call("search", { q: "x" }, async () => {
        seenWhileRunning = await kinds(store, "s", "run-r1");
        return { hits: 3 };
      });
    });
    expect(value).toEqual({ hits: 3 });
    expect(seenWhileRunning).toEqual(["run.started", "message", "tool_call"]);
    expect(await kinds(store, "s", "run-r1")).toEqual(["run.started", "message", "tool_call", "tool_result", "run.finished"]);
    const events = await store.readStream(streamId("s", "run-r1"));
    expect(events[0]?.fields["capabilities"]).toEqual({ profile: "typescript-loop", request_before_call: "strict", record_outcome: "strict", recovery: "strict" });
    expect(events[3]?.fields).toMatchObject({ attempt_id: "r1/c1#1", status: "ok", result: { hits: 3 }, parents: [events[2]?.fields["event_id"]] });
    expect(await store.openAttempts("s")).toEqual([]);
  });

  it("a failing tool records its error and the run's", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder");
    await expect(
      recorder.within({ runId: "r1" }, (run) => run.call("boom", {}, () => { throw new TypeError("bad"); })),
    ).rejects.toThrow("bad");
    const events = await store.readStream(streamId("s", "run-r1"));
    expect(events[2]?.fields).toMatchObject({ status: "error", result: { error: "TypeError", message: "bad" } });
    expect(events[3]?.fields).toMatchObject({ kind: "run.finished", status: "error", error: "TypeError: bad" });
  });

  it("a resumed run returns recorded results, and stops at a call requested and never finished", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder", { leaseTtlMs: 300 });
    const crashed = await recorder.start({ runId: "r1" });
    await crashed.call("read", { path: "a" }, () => "contents");
    await crashed.beginCall("deploy", { env: "prod" });
    crashed.drop(); // the process dies inside the tool
    expect((await store.openAttempts("s")).map((a) => a.attemptId)).toEqual(["r1/c2#1"]);
    let calls = 0;
    const resumed = await recorder.start({ runId: "r1", resume: true, leaseWaitMs: 2000 });
    expect(await resumed.call("read", { path: "a" }, () => { calls += 1; return "again"; })).toBe("contents");
    await expect(resumed.call("deploy", { env: "prod" }, () => { calls += 1; })).rejects.toBeInstanceOf(UnresolvedAttempt);
    expect(calls).toBe(0);
    await resumed.finish();
  });

  it("an operator's resolution of the open call is what the resumed run gets", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder", { leaseTtlMs: 300 });
    const crashed = await recorder.start({ runId: "r1" });
    await crashed.beginCall("deploy", { env: "prod" });
    crashed.drop();
    // What `ledger-bus resolve s r1/c1#1 --ok '{"deployed": true}'` writes (ledger_bus/operations/resolve.py).
    const [open_] = await store.openAttempts("s");
    await store.append(streamId("s", open_?.stream ?? ""), "any", `resolve:${open_?.attemptId ?? ""}`, [
      { type: "tool_result", agent: "operator", tool: "deploy", attempt_id: "r1/c1#1", status: "ok", result: { deployed: true }, run_id: "r1" },
    ]);
    const resumed = await recorder.start({ runId: "r1", resume: true, leaseWaitMs: 2000 });
    expect(await resumed.call("deploy", { env: "prod" }, () => { throw new Error("ran again"); })).toEqual({ deployed: true });
    await resumed.finish();
  });

  it("a tool safe to replay runs again on resume, its abandoned attempt closed first", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder", { leaseTtlMs: 300 });
    const crashed = await recorder.start({ runId: "r1" });
    await crashed.beginCall("fetch", {}, { safeToReplay: true });
    crashed.drop();
    const resumed = await recorder.start({ runId: "r1", resume: true, leaseWaitMs: 2000 });
    expect(await resumed.call("fetch", {}, () => "fresh", { safeToReplay: true })).toBe("fresh");
    await resumed.finish();
    const events = await store.readStream(streamId("s", "run-r1"));
    const results = events.filter((e) => e.fields["type"] === "tool_result").map((e) => [e.fields["attempt_id"], e.fields["status"]]);
    expect(results).toEqual([["r1/c1#1", "error"], ["r1/c1#2", "ok"]]);
    expect(await store.openAttempts("s")).toEqual([]);
  });

  it("a recorded error is raised again on resume, not retried", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder", { leaseTtlMs: 300 });
    await recorder.within({ runId: "r1" }, (run) => run.call("t", {}, () => { throw new Error("no"); })).catch(() => undefined);
    const resumed = await recorder.start({ runId: "r1", resume: true });
    await expect(resumed.call("t", {}, () => "yes")).rejects.toBeInstanceOf(ToolFailed);
    await resumed.finish();
  });

  it("a live run's lease keeps a second process out; an expired one lets it in", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder", { leaseTtlMs: 200 });
    const live = await recorder.start({ runId: "r1" });
    await sleep(300); // renewed meanwhile
    await expect(recorder.start({ runId: "r1", resume: true })).rejects.toBeInstanceOf(LedgerError);
    await live.finish();
    const next = await recorder.start({ runId: "r1", resume: true });
    await next.finish();
  });

  it("a run whose lease another process took writes nothing more, and records no finish", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder");
    const first = await recorder.start({ runId: "r1" });
    await first.message("before");
    // The first's holding is over, as a process stopped past its TTL leaves it, and another resumes the run.
    await store.lease("release", "s", "run-r1", (first as unknown as { owner: string }).owner, 0);
    const second = await recorder.start({ runId: "r1", resume: true });
    await expect(first.message("zombie")).rejects.toBeInstanceOf(LeaseLost);
    let ran = false;
    await expect(first.call("deploy", {}, () => { ran = true; })).rejects.toBeInstanceOf(RequestNotRecorded);
    await expect(first.snapshot({ step: 2 })).rejects.toBeInstanceOf(LeaseLost);
    await first.finish();
    expect(ran).toBe(false);
    await second.message("after");
    await second.finish();
    expect(await kinds(store, "s", "run-r1")).toEqual(["run.started", "message", "run.resumed", "message", "run.finished"]);
    const said = (await store.readStream(streamId("s", "run-r1"))).map((e) => e.fields["body"]).filter(Boolean);
    expect(said).toEqual(["before", "after"]);
    expect(await store.streamVersion(streamId("s", "native-r1"))).toBe(0);
  });

  it("a run stopped past its lease, with nobody taking it, writes nothing when it goes on", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder", { leaseTtlMs: 150 });
    const run = await recorder.start({ runId: "r1" });
    // A process stopped: its event loop runs nothing, renewals included, past the lease's TTL.
    const stopped = Date.now() + 400;
    while (Date.now() < stopped) {
      // nothing runs meanwhile
    }
    await expect(run.message("late")).rejects.toBeInstanceOf(LeaseLost);
    await run.finish();
    expect(await kinds(store, "s", "run-r1")).toEqual(["run.started"]);
    const next = await recorder.start({ runId: "r1", resume: true });
    await next.message("on time");
    await next.finish();
    expect(await kinds(store, "s", "run-r1")).toEqual(["run.started", "run.resumed", "message", "run.finished"]);
  });

  it("a request that cannot be recorded stops the call", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "coder");
    const run = await recorder.start({ runId: "r1" });
    await store.append(streamId("s", "run-r1"), "any", "someone-else", [{ type: "message", agent: "x", body: "in between" }]);
    let ran = false;
    await expect(run.call("t", {}, () => { ran = true; })).rejects.toBeInstanceOf(RequestNotRecorded);
    expect(ran).toBe(false);
  });

  it("snapshots and the events after the newest one rebuild a loop's state", async () => {
    const store = open(kind);
    const recorder = new Recorder(store, "s", "loop");
    const run = await recorder.start({ runId: "r1" });
    await run.message("one");
    await run.snapshot({ step: 1, notes: ["one"] });
    await run.message("two");
    await run.call("t", { n: 2 }, () => 4);
    const recovery = await recorder.recover("r1");
    expect(recovery.state).toEqual({ step: 1, notes: ["one"] });
    expect(recovery.events.map((e) => e.fields["type"])).toEqual(["message", "tool_call", "tool_result"]);
    await run.finish();
  });

  it("a delegation links the child run to the call that asked for it", async () => {
    const store = open(kind);
    const parent = await new Recorder(store, "s", "lead").start({ runId: "p" });
    const delegation = await parent.delegate("coder", "write it");
    await new Recorder(store, "s", "coder").within({ runId: delegation.childRunId, parents: [delegation.callEventId] }, async (child) => {
      await child.message("done");
    });
    await parent.finishDelegation(delegation, "ok", { written: true });
    await parent.finish();
    const started = (await store.readStream(streamId("s", `run-${delegation.childRunId}`)))[0];
    expect(started?.fields["parents"]).toEqual([delegation.callEventId]);
    expect(await store.openAttempts("s")).toEqual([]);
  });
});
