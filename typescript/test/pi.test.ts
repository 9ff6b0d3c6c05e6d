// The Pi adapter, held to Pi: a session written through the ledger's session manager is what
// Pi's own manager writes, loads back entry for entry (branches and the active leaf too), and
// a Pi session file imported exports back byte for byte; tool calls are requested before they
// run and their outcomes recorded, and a resumed session returns a recorded outcome instead of
// running the tool again.
import { mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { SessionManager, type SessionEntry } from "@earendil-works/pi-coding-agent";
import { describe, expect, it } from "vitest";

import { PiLedger, PiSessionTaken } from "../src/adapters/pi.js";
import { currentCall, type CurrentCall, idempotencyKey, streamId, UnresolvedAttempt, type EventStore } from "../src/index.js";
import { fauxAssistantMessage, fauxText, fauxToolCall, nesting, scripted, tool } from "./support/pi.js";
import { stores } from "./support/stores.js";

const { open } = stores(["memory", "redis"]);

const TWO_TOOLS = () => [
  fauxAssistantMessage([fauxText("looking both up"), fauxToolCall("search", { q: "x" }, { id: "call-1" }), fauxToolCall("fetch", { q: "y" }, { id: "call-2" })], { stopReason: "toolUse" }),
  fauxAssistantMessage("x is 1 and y is 2"),
];
const TOOLS = (calls: Map<string, number>) => [tool("search", calls, (a) => `found ${a.q}`), tool("fetch", calls, (a) => `fetched ${a.q}`)];

/** What an entry is, without what differs from run to run (ids, times, the fake model's api). */
function shape(entries: SessionEntry[]): unknown[] {
  const position = new Map(entries.map((e, at) => [e.id, at]));
  return entries.map((e) => {
    const { id: _id, parentId, timestamp: _t, ...rest } = e as SessionEntry & Record<string, unknown>;
    const body = JSON.parse(JSON.stringify(rest)) as Record<string, unknown>;
    const message = body["message"] as Record<string, unknown> | undefined;
    if (message) {
      delete message["timestamp"];
      delete message["api"];
      delete message["responseId"];
      delete message["durationMs"]; // a tool's run time, Pi 1.x's
    }
    return { parent: parentId === null ? null : position.get(parentId), ...body };
  });
}

/** What the users said in a Pi session's stream, in order. */
async function userSaid(store: EventStore, session: string, stream: string): Promise<unknown[]> {
  return (await store.readStream(streamId(session, stream))).filter((e) => e.fields["type"] === "message" && e.fields["agent"] === "user").map((e) => e.fields["body"]);
}

const ownerOf = (pi: PiLedger): string => (pi as unknown as { owner: string }).owner;

async function kinds(store: EventStore, session: string, stream: string): Promise<string[]> {
  return (await store.readStream(streamId(session, stream))).map((e) =>
    e.fields["type"] === "mutation" ? String(e.fields["kind"]) : `${String(e.fields["type"])}:${String(e.fields["agent"])}`,
  );
}

describe.each(["memory", "redis"] as const)("the Pi adapter on %s", (kind) => {
  it("a run with two tools writes what Pi's own manager writes, and the record beside it", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task", cwd: "/work" });
    const ours = await scripted(pi.sessionManager, TWO_TOOLS(), TOOLS, pi.extension);
    await ours.session.prompt("what are x and y?");
    await pi.flush();

    const dir = mkdtempSync(join(tmpdir(), "lb-pi-own-"));
    const own = SessionManager.create("/work", dir);
    const theirs = await scripted(own, TWO_TOOLS(), TOOLS);
    await theirs.session.prompt("what are x and y?");

    expect(shape(pi.sessionManager.getEntries())).toEqual(shape(own.getEntries()));
    expect(Object.fromEntries(ours.calls)).toEqual({ search: 1, fetch: 1 });
    const stream = pi.streamName;
    expect(await kinds(store, "task", stream)).toEqual([
      "pi.session", "run.started",
      "pi.entry", "pi.entry", "pi.entry", // the model, the thinking level, the system prompt
      "pi.entry", "message:user",
      "pi.entry", "tool_call:pi", "tool_result:pi", "message:pi", "tool_call:pi", "tool_call:pi",
      "tool_result:pi", "tool_result:pi", // by the hooks, as each tool finished
      "pi.entry", "pi.entry", // the tool results' entries
      "pi.entry", "tool_call:pi", "tool_result:pi", "message:pi",
    ]);
    const events = await store.readStream(streamId("task", stream));
    const calls = events.filter((e) => e.fields["type"] === "tool_call" && e.fields["tool"] !== "model").map((e) => [e.fields["attempt_id"], e.fields["tool"], e.fields["args"]]);
    expect(calls).toEqual([["call-1", "search", { q: "x" }], ["call-2", "fetch", { q: "y" }]]);
    // Each call carries its idempotency key, what a tool gets from pi.keyOf(its toolCallId).
    const keys = events.filter((e) => e.fields["type"] === "tool_call" && e.fields["tool"] !== "model").map((e) => e.fields["idempotency_key"]);
    expect(keys).toEqual([pi.keyOf("call-1"), pi.keyOf("call-2")]);
    expect(pi.keyOf("call-1")).toBe(idempotencyKey("task", stream, "call-1"));
    const results = events.filter((e) => e.fields["type"] === "tool_result" && e.fields["tool"] !== "model");
    expect(results.map((e) => [e.fields["attempt_id"], e.fields["status"], e.fields["result"]])).toEqual([
      ["call-1", "ok", { content: [{ type: "text", text: "found x" }], details: { tool: "search", q: "x" } }],
      ["call-2", "ok", { content: [{ type: "text", text: "fetched y" }], details: { tool: "fetch", q: "y" } }],
    ]);
    const answer = events.filter((e) => e.fields["type"] === "message").at(-1)?.fields;
    expect(answer?.["body"]).toBe("x is 1 and y is 2");
    const cost = events.filter((e) => e.fields["type"] === "tool_result" && e.fields["tool"] === "model").at(0)?.fields["result"] as Record<string, unknown>;
    expect(cost).toMatchObject({ model: "faux-1", provider: "faux", finish_reason: "toolUse", tool_calls: ["call-1", "call-2"] });
    expect((cost["usage"] as Record<string, number>)["output_tokens"]).toBeGreaterThan(0);
    expect(await store.openAttempts("task")).toEqual([]);
    await pi.close();
    // Loaded back: the same entries, the same tree, the same context for the model.
    const again = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    expect(again.sessionManager.getEntries()).toEqual(pi.sessionManager.getEntries());
    expect(again.sessionManager.getLeafId()).toBe(pi.sessionManager.getLeafId());
    expect(again.sessionManager.buildSessionContext()).toEqual(pi.sessionManager.buildSessionContext());
    expect(again.sessionManager.getHeader()).toEqual(pi.sessionManager.getHeader());
    await again.close();
  });

  it("a recorded tool reads its call, its key among it, from currentCall()", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "keys", cwd: "/work" });
    const seen: CurrentCall[] = [];
    const tools = (calls: Map<string, number>) =>
      pi.recordTools(
        TOOLS(calls).map((t) => ({
          ...t,
          execute: async (...args: Parameters<typeof t.execute>) => {
            seen.push(currentCall());
            return t.execute(...args);
          },
        })),
      );
    const ours = await scripted(pi.sessionManager, TWO_TOOLS(), tools, pi.extension);
    await ours.session.prompt("what are x and y?");
    await pi.flush();
    expect(seen.map((c) => [c.tool, c.attemptId, c.args, c.idempotencyKey])).toEqual([
      ["search", "call-1", { q: "x" }, pi.keyOf("call-1")],
      ["fetch", "call-2", { q: "y" }, pi.keyOf("call-2")],
    ]);
    const requests = (await store.readStream(streamId("keys", pi.streamName))).filter((e) => e.fields["type"] === "tool_call" && e.fields["tool"] !== "model");
    expect(requests.map((e) => e.fields["idempotency_key"])).toEqual([pi.keyOf("call-1"), pi.keyOf("call-2")]);
    await pi.close();
  });

  it("a branch, a label, a compaction, and the active leaf moved without an entry, load back as they were", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task" });
    const first = await scripted(pi.sessionManager, [fauxAssistantMessage("one"), fauxAssistantMessage("two"), fauxAssistantMessage("three")], () => [], pi.extension);
    await first.session.prompt("first");
    const afterFirst = pi.sessionManager.getLeafId() as string;
    await first.session.prompt("second");
    pi.sessionManager.branch(afterFirst); // back to the first answer
    await first.session.prompt("second, otherwise");
    pi.sessionManager.appendLabelChange(afterFirst, "where it forked");
    pi.sessionManager.appendCompaction("the story so far", afterFirst, 1234);
    const branchedLeaf = pi.sessionManager.getLeafId();
    await pi.close();
    const tree = pi.sessionManager.getTree();
    const reopened = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    expect(reopened.sessionManager.getTree()).toEqual(tree);
    expect(reopened.sessionManager.getLeafId()).toBe(branchedLeaf);
    expect(reopened.sessionManager.getLabel(afterFirst)).toBe("where it forked");
    expect(reopened.sessionManager.buildSessionContext()).toEqual(pi.sessionManager.buildSessionContext());
    // Moved back without appending anything: Pi's own file would forget it; the ledger does not.
    reopened.sessionManager.branch(afterFirst);
    await reopened.close();
    const third = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    expect(third.sessionManager.getLeafId()).toBe(afterFirst);
    await third.close();
  });

  it("the calls a tool makes, which the transcript never shows, are recorded as children of its call", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task" });
    const run = await scripted(
      pi.sessionManager,
      [fauxAssistantMessage([fauxToolCall("script", { q: "x y" }, { id: "call-1" })], { stopReason: "toolUse" }), fauxAssistantMessage("x and y found")],
      (calls) => [tool("search", calls, (a) => `found ${a.q}`), nesting("script", "search", calls)],
      pi.extension,
    );
    await run.session.prompt("find x and y");
    await pi.flush();
    expect(Object.fromEntries(run.calls)).toEqual({ script: 1, search: 2 });
    const events = await store.readStream(streamId("task", pi.streamName));
    const calls = events.filter((e) => e.fields["type"] === "tool_call" && e.fields["tool"] !== "model");
    expect(calls.map((e) => [e.fields["attempt_id"], e.fields["tool"]])).toEqual([["call-1", "script"], ["call-1/1", "search"], ["call-1/2", "search"]]);
    const parent = calls[0]?.fields["event_id"];
    expect(calls.slice(1).map((e) => e.fields["parents"])).toEqual([[parent], [parent]]);
    const results = events.filter((e) => e.fields["type"] === "tool_result" && e.fields["tool"] !== "model");
    expect(results.map((e) => [e.fields["attempt_id"], (e.fields["result"] as { content: { text: string }[] }).content[0]?.text])).toEqual([
      ["call-1/1", "found x"],
      ["call-1/2", "found y"],
      ["call-1", "found x; found y"],
    ]);
    expect(await store.openAttempts("task")).toEqual([]);
    // The transcript holds the parent call alone, as Pi's own.
    const transcript = pi.sessionManager.buildSessionContext().messages.filter((m) => (m as { role: string }).role === "toolResult");
    expect(transcript.map((m) => (m as { toolCallId: string }).toolCallId)).toEqual(["call-1"]);
    await pi.close();
  });

  it("usage, context edits, and the usage of compactions and branch summaries load back, their model calls recorded", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task" });
    const first = await scripted(pi.sessionManager, [fauxAssistantMessage("one"), fauxAssistantMessage("two")], () => [], pi.extension);
    await first.session.prompt("first");
    const answer = pi.sessionManager.getLeafId() as string;
    const usage = { input: 10, output: 5, cacheRead: 2, cacheWrite: 0, totalTokens: 17, cost: { input: 0.1, output: 0.2, cacheRead: 0, cacheWrite: 0, total: 0.3 } };
    pi.sessionManager.appendUsage("cache_warm", "faux", "faux-1", usage, "kept warm");
    pi.sessionManager.appendContextEdit(answer, { content: [{ type: "text", text: "one, edited" }] });
    pi.sessionManager.appendCompaction("so far", answer, 99, undefined, false, usage);
    await first.session.prompt("second");
    pi.sessionManager.branchWithSummary(answer, "what the other branch did", undefined, false, usage);
    await pi.close();
    const reopened = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    expect(reopened.sessionManager.getEntries()).toEqual(pi.sessionManager.getEntries());
    expect(reopened.sessionManager.getLeafId()).toBe(pi.sessionManager.getLeafId());
    expect(reopened.sessionManager.buildSessionContext()).toEqual(pi.sessionManager.buildSessionContext());
    const costs = (await store.readStream(streamId("task", pi.streamName)))
      .filter((e) => e.fields["type"] === "tool_result" && e.fields["tool"] === "model")
      .map((e) => e.fields["result"] as Record<string, unknown>)
      .filter((r) => r["purpose"] !== undefined);
    expect(costs.map((r) => [r["purpose"], r["model"], r["cost_usd"], (r["usage"] as Record<string, number>)["input_tokens"]])).toEqual([
      ["cache_warm", "faux-1", 0.3, 10],
      ["compaction", null, 0.3, 10],
      ["branch_summary", null, 0.3, 10],
    ]);
    await reopened.close();
  });

  it("a Pi session file imported exports back byte for byte, and opens as Pi opens it", async () => {
    const store = open(kind);
    const dir = mkdtempSync(join(tmpdir(), "lb-pi-file-"));
    const own = SessionManager.create("/work", dir);
    const run = await scripted(own, TWO_TOOLS(), TOOLS);
    await run.session.prompt("what are x and y?");
    own.branch((own.getEntries()[2] as SessionEntry).id);
    own.appendMessage({ role: "user", content: "another way", timestamp: 1 });
    const file = join(dir, readdirSync(dir)[0] as string);
    const piSession = await PiLedger.importFile(store, "imported", file);
    expect(piSession).toBe(own.getSessionId());
    const out = join(dir, "exported.jsonl");
    await PiLedger.exportFile(store, "imported", piSession, out);
    expect(readFileSync(out).equals(readFileSync(file))).toBe(true);
    const opened = await PiLedger.open(store, { session: "imported", piSession });
    const pis = SessionManager.open(file);
    expect(opened.sessionManager.getEntries()).toEqual(pis.getEntries());
    expect(opened.sessionManager.getLeafId()).toBe(pis.getLeafId());
    const recorded = await store.readStream(streamId("imported", `pi.${piSession}`));
    expect(recorded.filter((e) => e.fields["type"] === "tool_result" && e.fields["tool"] !== "model").map((e) => e.fields["attempt_id"])).toEqual(["call-1", "call-2"]);
    await opened.close();
  });

  it("a session Pi 0.73 wrote opens on Pi 1.x: imported, exported byte for byte, and the agent goes on from it", async () => {
    // A file of Pi 0.73.1's own (test/fixtures), which Pi 1.x reads as it is (session version 3).
    const store = open(kind);
    const file = join(import.meta.dirname, "fixtures", "pi-0.73.1-session.jsonl");
    const piSession = await PiLedger.importFile(store, "old", file);
    const out = join(mkdtempSync(join(tmpdir(), "lb-pi-old-")), "exported.jsonl");
    await PiLedger.exportFile(store, "old", piSession, out);
    expect(readFileSync(out).equals(readFileSync(file))).toBe(true);
    const opened = await PiLedger.open(store, { session: "old", piSession });
    const pis = SessionManager.open(file, mkdtempSync(join(tmpdir(), "lb-pi-old-")));
    expect(opened.sessionManager.getEntries()).toEqual(pis.getEntries());
    expect(opened.sessionManager.buildSessionContext()).toEqual(pis.buildSessionContext());
    const next = await scripted(opened.sessionManager, [fauxAssistantMessage("z is 3")], () => [], opened.extension);
    await next.session.prompt("and z?");
    await opened.close();
    const again = await PiLedger.open(store, { session: "old", piSession });
    const said = again.sessionManager.buildSessionContext().messages.map((m) => (m as { role: string }).role);
    expect(said.slice(-2)).toEqual(["user", "assistant"]);
    expect(again.sessionManager.getEntries().slice(0, pis.getEntries().length)).toEqual(pis.getEntries());
    await again.close();
  });

  it("a session resumed after a crash in a tool gets the recorded outcome instead of running it again", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task", leaseTtlMs: 300 });
    let release!: () => void;
    const gate = new Promise<void>((done) => { release = done; });
    const crashed = await scripted(
      pi.sessionManager,
      [fauxAssistantMessage([fauxToolCall("deploy", { q: "prod" }, { id: "call-9" })], { stopReason: "toolUse" })],
      (calls) => [tool("deploy", calls, () => "deployed", gate)],
      pi.extension,
    );
    const stuck = crashed.session.prompt("deploy it");
    for (let i = 0; i < 100 && !(await store.openAttempts("task")).length; i++) await new Promise((d) => setTimeout(d, 20));
    // Inside the tool: its request committed, nothing of its outcome.
    expect((await store.openAttempts("task")).map((a) => [a.attemptId, a.tool, a.runId])).toEqual([["call-9", "deploy", pi.streamName]]);

    const resumed = await PiLedger.open(store, { session: "task", piSession: pi.piSession, leaseTtlMs: 300 }).catch((e: unknown) => e);
    expect(String(resumed)).toMatch(/open in another live process/); // the first still holds its lease

    // What `ledger-bus resolve task call-9 --ok '{"deployed": true}'` writes.
    await store.append(streamId("task", pi.streamName), "any", "resolve:call-9", [
      { type: "tool_result", agent: "operator", tool: "deploy", attempt_id: "call-9", status: "ok", result: { deployed: true }, run_id: pi.streamName },
    ]);
    // The first process is gone (its lease let go as a kill would leave it, expired).
    await store.lease("release", "task", `run-${pi.streamName}`, (pi as unknown as { owner: string }).owner, 0);
    const later = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    // Completed before Pi opens the session, so that Pi's agent starts from it.
    expect(await later.resume()).toEqual(["call-9"]);
    const next = await scripted(later.sessionManager, [fauxAssistantMessage("deployed, done")], (calls) => [tool("deploy", calls, () => "deployed AGAIN")], later.extension);
    await next.session.agent.continue();
    expect(next.calls.get("deploy")).toBeUndefined();
    const context = later.sessionManager.buildSessionContext().messages as { role: string; content: unknown }[];
    expect(context.map((m) => m.role)).toEqual(["system", "user", "assistant", "toolResult", "assistant"]);
    expect(context[3]?.content).toEqual([{ type: "text", text: '{"deployed":true}' }]);
    expect(await store.openAttempts("task")).toEqual([]);
    release();
    await stuck.catch(() => undefined);
    await later.close();
  });

  it("a call resolved after a crash inside a call it made: the made call is closed with it on resume", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task", leaseTtlMs: 300 });
    const never = new Promise<void>(() => undefined);
    const crashed = await scripted(
      pi.sessionManager,
      [fauxAssistantMessage([fauxToolCall("script", { q: "prod" }, { id: "call-1" })], { stopReason: "toolUse" })],
      (calls) => [tool("deploy", calls, () => "deployed", never), nesting("script", "deploy", calls)],
      pi.extension,
    );
    void crashed.session.prompt("deploy it");
    const open2 = async () => (await store.openAttempts("task")).map((a) => a.attemptId).sort();
    for (let i = 0; i < 100 && (await open2()).length < 2; i++) await new Promise((d) => setTimeout(d, 20));
    expect(await open2()).toEqual(["call-1", "call-1/1"]);
    await store.append(streamId("task", pi.streamName), "any", "resolve:call-1", [
      { type: "tool_result", agent: "operator", tool: "script", attempt_id: "call-1", status: "ok", result: { deployed: true }, run_id: pi.streamName },
    ]);
    await store.lease("release", "task", `run-${pi.streamName}`, (pi as unknown as { owner: string }).owner, 0);
    const later = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    expect(await later.resume()).toEqual(["call-1"]);
    expect(await store.openAttempts("task")).toEqual([]);
    const nested = (await store.readStream(streamId("task", pi.streamName))).filter((e) => e.fields["type"] === "tool_result" && e.fields["attempt_id"] === "call-1/1");
    expect(nested.map((e) => [e.fields["tool"], e.fields["status"], (e.fields["result"] as { outcome: string }).outcome])).toEqual([["deploy", "error", "unknown"]]);
    await later.close();
  });

  it("an unresolved call stops the resume; one of a tool safe to replay is handed back to the model", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task" });
    pi.sessionManager.appendMessage({ role: "user", content: "go", timestamp: 1 });
    pi.sessionManager.appendMessage({
      role: "assistant",
      content: [{ type: "toolCall", id: "c1", name: "deploy", arguments: { q: "a" } }, { type: "toolCall", id: "c2", name: "read", arguments: { q: "b" } }],
      api: "faux", provider: "faux", model: "faux-1",
      usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
      stopReason: "toolUse", timestamp: 2,
    } as never);
    await pi.close();
    const strict = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    await expect(strict.resume()).rejects.toBeInstanceOf(UnresolvedAttempt);
    await strict.close();
    const lenient = await PiLedger.open(store, { session: "task", piSession: pi.piSession, safeToReplay: ["deploy", "read"] });
    expect(await lenient.resume()).toEqual(["c1", "c2"]);
    const results = lenient.sessionManager.buildSessionContext().messages.filter((m) => (m as { role: string }).role === "toolResult");
    expect(results.map((m) => (m as { isError: boolean }).isError)).toEqual([true, true]);
    expect(await store.openAttempts("task")).toEqual([]);
    await lenient.close();
  });
  it("a session another process took over refuses this one's next write, stores nothing of it, and its holder goes on", async () => {
    const store = open(kind);
    const first = await PiLedger.open(store, { session: "task" });
    first.sessionManager.appendMessage({ role: "user", content: "one", timestamp: 1 });
    await first.flush();
    // The first's holding is over, as a process stopped past its lease leaves it, and a second opens the session.
    await store.lease("release", "task", `run-${first.streamName}`, ownerOf(first), 0);
    const second = await PiLedger.open(store, { session: "task", piSession: first.piSession });
    first.sessionManager.appendMessage({ role: "user", content: "zombie", timestamp: 2 });
    const told = (await first.flush().catch((err: unknown) => err)) as Error;
    expect(told).toBeInstanceOf(PiSessionTaken);
    expect(told.message).toMatch(new RegExp(`^Pi session ${first.piSession} was taken over by another process \\(its lease lapsed and another process took it`));
    expect(() => first.sessionManager.appendMessage({ role: "user", content: "zombie again", timestamp: 3 })).toThrow(PiSessionTaken);
    await expect(first.close()).rejects.toBeInstanceOf(PiSessionTaken);
    second.sessionManager.appendMessage({ role: "user", content: "two", timestamp: 4 });
    await second.close();
    expect(await userSaid(store, "task", first.streamName)).toEqual(["one", "two"]);
    expect((await kinds(store, "task", first.streamName)).filter((k) => k.startsWith("run."))).toEqual(["run.started", "run.started", "run.finished"]);
  });

  it("a session whose lease expired with nobody taking it refuses the next write, and says so", async () => {
    const store = open(kind);
    const pi = await PiLedger.open(store, { session: "task", leaseTtlMs: 150 });
    // A process stopped: its event loop runs nothing, renewals included, past the lease's TTL.
    const stopped = Date.now() + 400;
    while (Date.now() < stopped) {
      // nothing runs meanwhile
    }
    pi.sessionManager.appendMessage({ role: "user", content: "late", timestamp: 1 });
    const told = (await pi.flush().catch((err: unknown) => err)) as Error;
    expect(told).toBeInstanceOf(PiSessionTaken);
    expect(told.message).toMatch(new RegExp(`^Pi session ${pi.piSession} lost its lease: it expired`));
    expect(told.message).not.toMatch(/taken over|another process (holds|took)/);
    await expect(pi.close()).rejects.toBeInstanceOf(PiSessionTaken);
    expect(await userSaid(store, "task", pi.streamName)).toEqual([]);
    const again = await PiLedger.open(store, { session: "task", piSession: pi.piSession });
    again.sessionManager.appendMessage({ role: "user", content: "on time", timestamp: 2 });
    await again.close();
    expect(await userSaid(store, "task", pi.streamName)).toEqual(["on time"]);
    expect((await kinds(store, "task", pi.streamName)).filter((k) => k.startsWith("run."))).toEqual(["run.started", "run.started", "run.finished"]);
  });
});
