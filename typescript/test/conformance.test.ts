// conformance/appends.json: sequences of appends and reads with the outcome each must have,
// replayed on every store, as tests/contract/test_conformance_vectors.py replays them on the Python stores.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

import { describe, expect, it } from "vitest";

import * as lb from "../src/index.js";
import { KINDS, stores } from "./support/stores.js";

interface Step {
  append?: { stream: string; expected_version: number | "any"; append_id: string; events: unknown[] };
  read?: { stream: string; after_version: number };
  scan?: { after: string | null }; // JSON: null is from the start
  expect: Record<string, unknown>;
}
interface Scenario {
  name: string;
  session: string;
  steps: Step[];
}

const FILE = resolve(import.meta.dirname, "..", "..", "conformance", "appends.json");
const scenarios = (JSON.parse(readFileSync(FILE, "utf8")) as { scenarios: Scenario[] }).scenarios;
const { open } = stores();

describe.each(KINDS)("conformance/appends.json on %s", (kind) => {
  it.each(scenarios.map((s) => [s.name, s] as const))("%s", async (_, scenario) => {
    const store = open(kind);
    for (const step of scenario.steps) {
      const expected = step.expect;
      if (step.append) {
        const spec = step.append;
        const ref = lb.streamId(scenario.session, spec.stream);
        const attempt = store.append(ref, spec.expected_version, spec.append_id, spec.events);
        if ("error" in expected) {
          const err = await attempt.then(
            () => null,
            (e: unknown) => e,
          );
          const Kind = (lb as unknown as Record<string, new (...a: never[]) => Error>)[expected["error"] as string];
          expect(err).toBeInstanceOf(Kind as never);
          for (const name of ["expected", "actual", "index", "field"]) {
            if (name in expected) expect((err as Record<string, unknown>)[name]).toEqual(expected[name]);
          }
          continue;
        }
        const result = await attempt;
        expect([result.firstVersion, result.lastVersion, result.deduplicated]).toEqual([
          expected["first_version"],
          expected["last_version"],
          expected["deduplicated"],
        ]);
        continue;
      }
      let events: lb.RecordedEvent[];
      if (step.read) {
        events = await store.readStream(lb.streamId(scenario.session, step.read.stream), { after: step.read.after_version });
        expect(events.map((e) => e.version)).toEqual(expected["versions"]);
      } else {
        events = await store.scanSession(scenario.session, { after: step.scan?.after ?? undefined });
        expect(events.map((e) => e.stream.name)).toEqual(expected["streams"]);
      }
      if ("bodies" in expected) expect(events.map((e) => e.fields["body"])).toEqual(expected["bodies"]);
      if ("event_ids" in expected) expect(events.map((e) => e.fields["event_id"])).toEqual(expected["event_ids"]);
    }
  });
});
