// Durability levels: an append waits for its replicas (WAIT) or the AOF (WAITAOF), pipelined
// behind the script; short of that it is reported written but not confirmed, and a retry with
// the same append_id deduplicates and waits again.
import calculateSlot from "cluster-key-slot";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { BackendRefused, connect, DurabilityNotConfirmed, InvalidInput, streamId } from "../src/index.js";
import { LocalCluster, LocalServer } from "./support/servers.js";
import { msg } from "./support/events.js";

const primary = new LocalServer(["--appendonly", "yes"]);
let replica: LocalServer;
const cluster = new LocalCluster();

beforeAll(async () => {
  await Promise.all([primary.start(), cluster.start()]);
  replica = new LocalServer(["--replicaof", "127.0.0.1", String(primary.port)]);
  await replica.start();
  const client = new Redis(replica.port, "127.0.0.1");
  for (let i = 0; i < 200 && !(await client.info("replication")).includes("master_link_status:up"); i++) {
    await new Promise((done) => setTimeout(done, 50));
  }
  client.disconnect();
});
afterAll(async () => {
  await replica.close();
  await primary.close();
  await cluster.close();
});

const REF = streamId("d", "main");

describe("durability", () => {
  it("replicas:1 confirms each append once the replica has it", async () => {
    const store = connect(`${primary.url}?durability=replicas:1`, { prefix: "r1" });
    const done = await store.append(REF, 0, "a1", [msg("one")]);
    expect([done.durability, done.replicas]).toEqual(["replicas:1", 1]);
    const onReplica = connect(replica.url, { prefix: "r1" });
    expect((await onReplica.scanSession("d")).map((e) => e.fields["body"])).toEqual(["one"]);
    await Promise.all([store.close(), onReplica.close()]);
  });

  it("short of its replicas an append is written, reported not confirmed, and a retry deduplicates", async () => {
    const store = connect(primary.url, { prefix: "r2", durability: "replicas:2", });
    const first = await store.append(REF, 0, "a1", [msg("one")]).catch((err: unknown) => err);
    expect(first).toBeInstanceOf(DurabilityNotConfirmed);
    expect((first as DurabilityNotConfirmed).message).toMatch(/1 of 2 replica\(s\) confirmed/);
    const again = await store.append(REF, 0, "a1", [msg("one")]).catch((err: unknown) => err);
    expect(again).toBeInstanceOf(DurabilityNotConfirmed);
    expect(((again as DurabilityNotConfirmed).result as { deduplicated: boolean }).deduplicated).toBe(true);
    expect(await store.streamVersion(REF)).toBe(1);
    await store.close();
  });

  it("aof waits for the fsync where the server has WAITAOF, and is refused whole where not", async () => {
    const store = connect(primary.url, { prefix: "r3", durability: "aof" });
    const probe = new Redis(primary.port, "127.0.0.1");
    const hasWaitaof = await probe.call("WAITAOF", 0, 0, 1).then(() => true, () => false);
    probe.disconnect();
    const outcome = await store.append(REF, 0, "a1", [msg("one")]).catch((err: unknown) => err);
    if (hasWaitaof) {
      expect(outcome).toMatchObject({ durability: "aof", aof: true });
    } else {
      expect(outcome).toBeInstanceOf(BackendRefused);
      expect(await store.streamVersion(REF)).toBe(0);
    }
    await store.close();
  });

  it("on a cluster the WAIT goes to the session's node", async () => {
    const store = connect(`${cluster.url}?durability=replicas:1&durability_timeout_ms=100`, { prefix: "r4" });
    const nodes = cluster.nodes.map((node) => new Redis(node.port, "127.0.0.1"));
    const waits = async (): Promise<number[]> =>
      Promise.all(nodes.map(async (node) => Number(/cmdstat_wait:calls=(\d+)/.exec(await node.info("commandstats"))?.[1] ?? 0)));
    for (const session of ["a", "b", "c", "d", "e"]) {
      const before = await waits();
      const err = await store.append(streamId(session, "main"), 0, "x", [msg(session)]).catch((e: unknown) => e);
      // No replicas in this cluster: written on the session's primary, never confirmed.
      expect(err).toBeInstanceOf(DurabilityNotConfirmed);
      const after = await waits();
      // A node counts the keys of a slot it serves: only the session's node counts its log.
      const slot = calculateSlot(`r4:{${session}}:log`);
      const holder = await Promise.all(nodes.map((node) => node.call("CLUSTER", "COUNTKEYSINSLOT", slot).then(Number)));
      // (Twice where the node had not the script yet: the pipeline ran again once loaded.)
      expect(after.map((n, at) => n - (before[at] ?? 0) > 0)).toEqual(holder.map((keys) => keys > 0));
    }
    for (const node of nodes) node.disconnect();
    await store.close();
  });

  it("a level that cannot hold, or is not one, is refused at connect", () => {
    expect(() => connect("memory://", { durability: "replicas:1" })).toThrow(InvalidInput);
    expect(() => connect(primary.url, { durability: "replicas:0" })).toThrow(InvalidInput);
    expect(() => connect(`${primary.url}?durability=aof&durability_timeout_ms=soon`)).toThrow(InvalidInput);
  });
});
