/**
 * A Node process of the SDK driven by another, for the cross-language tests
 * (tests/contract/test_sdk_interop.py and test_typescript_interop.py): one JSON request a line
 * on stdin, one JSON reply a line on stdout, so that a Python test can have it append, read
 * and be killed mid-run.
 *
 *   node --import tsx test/support/peer.ts URL PREFIX
 *
 * Requests: {"op": "append", "session", "stream", "expected", "append_id", "events"},
 * {"op": "burst", "session", "stream", "count"} (appends one at a time, as fast as it can),
 * {"op": "ping"} (answered once connected), {"op": "scan", "session"}, {"op": "tail", "session", "n"}, {"op": "digest", "events"};
 * a run held open across requests (the recorder's fencing drill): run_start, run_message, run_finish;
 * the exactly-once drill's agent: pay (a run that charges the payment service, killed at kill_at);
 * Pi's (on Node 22): pi_hang, pi_resume, pi_open, pi_turn, pi_close.
 * Replies: {"ok": ...} or {"error": <the error's class name>, "message": ...}.
 */

import { request as httpRequest } from "node:http";
import { createInterface } from "node:readline";

import { connect, currentCall, eventLine, appendLine, prepareAppend, Recorder, type Run, streamId, type RecordedEvent } from "../../src/index.js";

// Pi is loaded by the requests that use it: it is most of a peer's start.
const pi = async (): Promise<[typeof import("../../src/adapters/pi.js"), typeof import("./pi.js")]> =>
  Promise.all([import("../../src/adapters/pi.js"), import("./pi.js")]);

// The Pi sessions this process holds open (pi_open), by Pi session id.
const opened = new Map<string, import("../../src/adapters/pi.js").PiLedger>();
// The runs this process holds open (run_start), by run id.
const runs = new Map<string, Run>();

const [url, prefix] = process.argv.slice(2);
const store = connect(url, { prefix: prefix ?? "lb" });

type Request = Record<string, unknown>;

const line = (event: RecordedEvent): Record<string, unknown> => eventLine(event);

async function handle(request: Request): Promise<unknown> {
  const session = request["session"] as string;
  switch (request["op"]) {
    case "append": {
      const ref = streamId(session, request["stream"] as string);
      const expected = request["expected"] as number | "any";
      return appendLine(await store.append(ref, expected, request["append_id"] as string, request["events"] as unknown[]));
    }
    case "burst": {
      const ref = streamId(session, request["stream"] as string);
      const results = [];
      for (let i = 0; i < (request["count"] as number); i++) {
        const event = { type: "message", agent: "node", body: `node ${i}` };
        results.push(appendLine(await store.append(ref, i, `node-${i}`, [event])));
      }
      return results;
    }
    case "ping":
      await store.streamVersion(streamId("ping", "ping"));
      return "pong";
    case "scan":
      return (await store.scanSession(session)).map(line);
    case "tail":
      return (await store.tail(session, { n: request["n"] as number })).map(line);
    case "hang_in_tool": {
      // A run that calls a tool which never returns: replied to once the request is
      // committed, so that the test can kill the process inside the tool.
      const recorder = new Recorder(store, session, "node-agent", { leaseTtlMs: request["lease_ms"] as number });
      const run = await recorder.start({ runId: request["run_id"] as string });
      const { attempt } = (await run.beginCall(request["tool"] as string, request["args"] as Record<string, unknown>)) as { attempt: { attemptId: string } };
      return attempt.attemptId;
    }
    case "resume_call": {
      // The run resumed: the call's recorded outcome, or the error that stops it.
      const recorder = new Recorder(store, session, "node-agent", { leaseTtlMs: request["lease_ms"] as number });
      const run = await recorder.start({ runId: request["run_id"] as string, resume: true, leaseWaitMs: 10_000 });
      let ran = false;
      try {
        const value = await run.call(request["tool"] as string, request["args"] as Record<string, unknown>, () => {
          ran = true;
          return "ran again";
        });
        return { value, ran };
      } finally {
        await run.finish();
      }
    }
    case "pay": {
      // The exactly-once drill's agent (tests/features/test_exactly_once.py): a run, resumed
      // when it has a history, that charges the payment service once under the call's key,
      // this process killed (SIGKILL) at request["kill_at"].
      const killAt = request["kill_at"] as string;
      const die = (): never => {
        process.kill(process.pid, "SIGKILL");
        throw new Error("unreachable");
      };
      const recorder = new Recorder(store, session, "node-payer", { leaseTtlMs: request["lease_ms"] as number });
      const run = await recorder.start({ runId: request["run_id"] as string, resume: true, leaseWaitMs: 10_000 });
      const paid = await run.call("charge", { amount: request["amount"], to: session }, async (args) => {
        const key = currentCall().idempotencyKey;
        if (killAt === "before_request") die();
        const body = JSON.stringify(args);
        const reply = await new Promise<{ status: number; text: string }>((done, failed) => {
          const sent = httpRequest(`${request["payments"] as string}/charges`, { method: "POST", headers: { "Content-Type": "application/json", "Idempotency-Key": key, "Content-Length": Buffer.byteLength(body) } }, (res) => {
            let text = "";
            res.on("data", (chunk: Buffer) => (text += chunk.toString()));
            res.on("end", () => { done({ status: res.statusCode ?? 0, text }); });
          });
          sent.on("error", failed);
          // The request is on the wire once written; its reply is never read.
          sent.end(body, () => {
            if (killAt === "after_send") die();
          });
        });
        if (reply.status !== 200 && reply.status !== 201) throw new Error(`the payment service answered ${reply.status}: ${reply.text}`);
        if (killAt === "after_reply") die();
        return JSON.parse(reply.text) as unknown;
      });
      if (killAt === "after_result") die();
      await run.finish();
      return paid;
    }
    case "run_start": {
      // A run started (or resumed, waiting for a stopped holder's lease) and held open.
      const recorder = new Recorder(store, session, "node-agent", { leaseTtlMs: request["lease_ms"] as number });
      const resume = Boolean(request["resume"]);
      const run = await recorder.start({ runId: request["run_id"] as string, resume, leaseWaitMs: resume ? 10_000 : 0 });
      runs.set(run.runId, run);
      return run.version;
    }
    case "run_message": {
      // The open run's next write: its stream's version after it.
      const run = runs.get(request["run_id"] as string);
      if (!run) throw new Error(`run ${String(request["run_id"])} is not open here`);
      await run.message(request["body"] as string);
      return run.version;
    }
    case "run_finish": {
      const run = runs.get(request["run_id"] as string);
      runs.delete(request["run_id"] as string);
      await run?.finish();
      return null;
    }
    case "pi_hang": {
      // A Pi agent whose model asks for `deploy`, which never returns: replied to once the
      // call's request is committed, so that the test can kill the process inside the tool.
      const [{ PiLedger }, { fauxAssistantMessage, fauxToolCall, scripted, tool }] = await pi();
      const ledger = await PiLedger.open(store, { session, leaseTtlMs: request["lease_ms"] as number });
      const never = new Promise<void>(() => undefined);
      const agent = await scripted(
        ledger.sessionManager,
        [fauxAssistantMessage([fauxToolCall("deploy", { q: "prod" }, { id: request["call_id"] as string })], { stopReason: "toolUse" })],
        (calls) => [tool("deploy", calls, () => "deployed", never)],
        ledger.extension,
      );
      void agent.session.prompt("deploy it");
      while (!(await store.openAttempts(session)).some((a) => a.attemptId === request["call_id"])) {
        await new Promise((done) => setTimeout(done, 10));
      }
      return ledger.piSession;
    }
    case "pi_resume": {
      // The Pi session opened again: what a crash left dangling completed from the ledger,
      // then the agent goes on; whether the tool ran again, and what the model was told.
      const [{ PiLedger }, { fauxAssistantMessage, scripted, tool }] = await pi();
      const ledger = await PiLedger.open(store, { session, piSession: request["pi_session"] as string });
      try {
        const completed = await ledger.resume();
        const agent = await scripted(ledger.sessionManager, [fauxAssistantMessage("done")], (calls) => [tool("deploy", calls, () => "deployed again")], ledger.extension);
        await agent.session.agent.continue();
        const messages = ledger.sessionManager.buildSessionContext().messages as { role: string; content: unknown }[];
        return { completed, ran: agent.calls.get("deploy") ?? 0, roles: messages.map((m) => m.role), told: messages.find((m) => m.role === "toolResult")?.content };
      } finally {
        await ledger.close();
      }
    }
    case "pi_open": {
      // A Pi session opened (a new one without pi_session) and held open, as a Pi process does.
      const [{ PiLedger }] = await pi();
      const piSession = request["pi_session"] as string | undefined;
      const ledger = await PiLedger.open(store, { session, leaseTtlMs: request["lease_ms"] as number, ...(piSession ? { piSession } : {}) });
      opened.set(ledger.piSession, ledger);
      return ledger.piSession;
    }
    case "pi_turn": {
      // One turn of the open session's agent: the prompt, the model's scripted answer; the
      // session's entries after it.
      const [, { fauxAssistantMessage, scripted }] = await pi();
      const ledger = opened.get(request["pi_session"] as string);
      if (!ledger) throw new Error(`Pi session ${String(request["pi_session"])} is not open here`);
      const agent = await scripted(ledger.sessionManager, [fauxAssistantMessage(request["answer"] as string)], () => [], ledger.extension);
      await agent.session.prompt(request["prompt"] as string);
      await ledger.flush();
      return ledger.sessionManager.getEntries().length;
    }
    case "pi_close": {
      const ledger = opened.get(request["pi_session"] as string);
      opened.delete(request["pi_session"] as string);
      await ledger?.close();
      return null;
    }
    case "digest":
      return prepareAppend("s", "x", "a", request["events"]).sha256.toString("hex");
    default:
      throw new Error(`unknown op ${String(request["op"])}`);
  }
}

const input = createInterface({ input: process.stdin });
for await (const text of input) {
  let reply: Record<string, unknown>;
  try {
    reply = { ok: await handle(JSON.parse(text) as Request) };
  } catch (err) {
    const error = err instanceof Error ? err : new Error(String(err));
    reply = { error: error.name, message: error.message };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
await store.close();
