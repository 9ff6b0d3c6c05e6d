// Fenced leases (ledger_bus/testing/contract/attempts.py's, ported): each new holding of a lease
// draws a greater token, and an append made under a holding that is over (expired, or taken by
// another owner) is refused with LeaseLost and writes nothing, before every other check (a
// zombie's appendId may be one the next holder used at the same version).
import { describe, expect, it } from "vitest";

import {
  ANY,
  type ConnectedStore,
  type Fence,
  InvalidInput,
  LeaseLost,
  Refused,
  streamId,
} from "../src/index.js";
import { msg } from "./support/events.js";
import { KINDS, stores } from "./support/stores.js";

const { open } = stores();
const S = "s1";
const MAIN = streamId(S, "main");
const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

async function refusal(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected the append to be refused");
}

async function holding(store: ConnectedStore, owner: string, ttlMs = 60_000): Promise<Fence> {
  return { lease: "run-1", owner, token: await store.lease("acquire", S, "run-1", owner, ttlMs) };
}

describe.each(KINDS)("fenced leases on %s", (kind) => {
  it("a lease is held by one owner until released, each new holding drawing a greater token", async () => {
    const store = open(kind);
    const mine = await store.lease("acquire", S, "run-1", "me", 60_000);
    expect(mine).toBeGreaterThanOrEqual(1);
    expect(await store.lease("acquire", S, "run-1", "me", 60_000)).toBe(mine); // its owner keeps it, and its token
    expect(await store.lease("acquire", S, "run-1", "you", 60_000)).toBe(0);
    expect(await store.lease("renew", S, "run-1", "you", 60_000)).toBe(0);
    expect(await store.lease("release", S, "run-1", "you", 0)).toBe(0);
    expect(await store.lease("renew", S, "run-1", "me", 60_000)).toBe(mine);
    expect(await store.lease("release", S, "run-1", "me", 0)).toBe(1);
    expect(await store.lease("renew", S, "run-1", "me", 60_000)).toBe(0); // released: over for good
    expect(await store.lease("acquire", S, "run-1", "you", 60_000)).toBeGreaterThan(mine);
  });

  it("an append under a lease lands only while its holding lasts", async () => {
    const store = open(kind);
    // Given a writer holding the lease, and its appends made under it
    const mine = await holding(store, "me");
    await store.append(MAIN, 0, "a1", [msg("one")], { fence: mine });
    // When another process takes the lease over (the first stopped past its TTL: released here)
    expect(await store.lease("release", S, "run-1", "me", 0)).toBe(1);
    const yours = await holding(store, "you");
    // Then the first writer's next append is refused, whatever version it names, and writes nothing
    for (const expected of [1, 0, ANY]) {
      const err = await refusal(store.append(MAIN, expected, "a2", [msg("zombie")], { fence: mine }));
      expect(err).toBeInstanceOf(LeaseLost);
      expect(err).toBeInstanceOf(Refused);
      expect((err as LeaseLost).token).toBe(yours.token);
      expect((err as LeaseLost).message).toBe(
        `lease run-1: the holding of me (token ${mine.token}) is over, another holding took it (token ${yours.token}); nothing written`,
      );
    }
    expect((await store.readStream(MAIN)).map((e) => e.fields["body"])).toEqual(["one"]);
    // And the rightful holder writes on, at the version it read
    expect((await store.append(MAIN, 1, "a2", [msg("two")], { fence: yours })).lastVersion).toBe(2);
    // And even a retry of an append recorded under the first holding is told the holding is over
    expect(await refusal(store.append(MAIN, 0, "a1", [msg("one")], { fence: mine }))).toBeInstanceOf(LeaseLost);
    expect(await refusal(store.append(MAIN, 1, "a2", [msg("two")], { fence: mine }))).toBeInstanceOf(LeaseLost);
    expect((await store.append(MAIN, 1, "a2", [msg("two")], { fence: yours })).deduplicated).toBe(true);
  });

  it("an append under an expired lease is refused, and so is its old token once the lease is taken again", async () => {
    const store = open(kind);
    const late = await holding(store, "me", 100);
    await sleep(300); // past the TTL; nobody took the lease
    const err = await refusal(store.append(MAIN, 0, "a1", [msg("late")], { fence: late }));
    expect(err).toBeInstanceOf(LeaseLost);
    expect((err as LeaseLost).message).toBe(`lease run-1: the holding of me (token ${late.token}) is over, it expired; nothing written`);
    expect(await store.streamVersion(MAIN)).toBe(0);
    // Taken again by the same owner, it is a new holding: the old token stays refused
    const again = await holding(store, "me");
    expect(again.token).toBeGreaterThan(late.token);
    expect(await refusal(store.append(MAIN, 0, "a1", [msg("late")], { fence: late }))).toBeInstanceOf(LeaseLost);
    await store.append(MAIN, 0, "a1", [msg("now")], { fence: again });
    expect(await store.streamVersion(MAIN)).toBe(1);
  });

  it("an append without a fence is not held to any lease", async () => {
    const store = open(kind);
    await holding(store, "me");
    expect((await store.append(MAIN, 0, "a1", [msg("operator")])).lastVersion).toBe(1);
    expect((await store.append(MAIN, 1, "a2", [msg("operator")], {})).lastVersion).toBe(2);
  });

  it.each([
    ["a lease name alone", "run-1"],
    ["a token of 0", { lease: "run-1", owner: "me", token: 0 }],
    ["a token that is no integer", { lease: "run-1", owner: "me", token: 1.5 }],
    ["a token as text", { lease: "run-1", owner: "me", token: "1" }],
    ["a lease name with a space", { lease: "run 1", owner: "me", token: 1 }],
    ["no owner", { lease: "run-1", token: 1 }],
    ["null", null],
  ])("a fence that is no fence (%s) is invalid input, and writes nothing", async (_, fence) => {
    const store = open(kind);
    await holding(store, "me");
    expect(await refusal(store.append(MAIN, 0, "a1", [msg("x")], { fence: fence as never }))).toBeInstanceOf(InvalidInput);
    expect(await store.streamVersion(MAIN)).toBe(0);
  });
});
