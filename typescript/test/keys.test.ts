// conformance/idempotency_keys.json: every SDK derives the same key for the same logical call.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

import { describe, expect, it } from "vitest";

import * as lb from "../src/index.js";

interface KeyVector {
  session_id: string;
  run_id: string;
  step_id: string;
  incarnation: number;
  key: string;
}

const FILE = resolve(import.meta.dirname, "..", "..", "conformance", "idempotency_keys.json");
const vectors = (JSON.parse(readFileSync(FILE, "utf8")) as { keys: KeyVector[] }).keys;

describe("conformance/idempotency_keys.json", () => {
  it.each(vectors.map((v) => [`${v.run_id}:${v.step_id}@${v.incarnation}`, v] as const))("%s", (_, v) => {
    expect(lb.idempotencyKey(v.session_id, v.run_id, v.step_id, v.incarnation)).toBe(v.key);
  });
});

describe("currentCall", () => {
  it("gives a recorded tool its call and its key, and throws outside one", async () => {
    const store = new lb.MemoryStore();
    const recorder = new lb.Recorder(store, "pay", "payer", { leaseTtlMs: 200 });
    const keys: string[] = [];
    const charge = async (args: Record<string, unknown>) => {
      await new Promise((done) => setTimeout(done, 1));
      const call = lb.currentCall();
      keys.push(call.idempotencyKey);
      expect([call.tool, call.sessionId, call.runId, call.stepId, call.args]).toEqual(["charge", "pay", "r1", "r1/c1", args]);
      return "ok";
    };
    await recorder.within({ runId: "r1" }, (run) => run.call("charge", { amount: 5 }, charge));
    expect(keys).toEqual([lb.idempotencyKey("pay", "r1", "r1/c1")]);
    expect(() => lb.currentCall()).toThrow(lb.NoCurrentCall);
  });
});
