// Redis Cluster URLs that name several seed nodes, `redis+cluster://H:P,H2:P2/0`, as the Python
// package reads them (tests/stores/test_redis_cluster_seeds.py): a client starts as long as one seed answers,
// the URL's credentials and TLS are every node's, and a malformed list is bad input at once.
import { rmSync } from "node:fs";
import { dirname } from "node:path";

import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
  BackendRefused,
  BackendUnavailable,
  connect,
  type EventStore,
  InvalidInput,
  streamId,
} from "../src/index.js";
import { nodesUrl } from "../src/store/urls.js";
import { msg } from "./support/events.js";
import { freePort, LocalCluster, type ServerTls } from "./support/servers.js";
import { makePki, serverHasTls } from "./support/tls.js";

const seeds = (ports: number[], credentials = "", scheme = "redis+cluster", query = ""): string =>
  `${scheme}://${credentials}${ports.map((port) => `127.0.0.1:${port}`).join(",")}/0${query}`;

// Sessions enough that their slots fall on every node of three.
const SESSIONS = Array.from({ length: 9 }, (_, n) => `seeded-${n}`);

/** Appends to every session through `store`, and what a store of `other` then reads. */
async function writtenAndRead(store: EventStore, other: EventStore): Promise<string[]> {
  for (const session of SESSIONS) {
    await store.append(streamId(session, "main"), 0, "a1", [msg(`through ${session}`)]);
  }
  const read = await Promise.all(SESSIONS.map((session) => other.tail(session, { n: 10 })));
  return read.flat().map((event) => event.fields["body"] as string);
}

/**
 * The user `seeder` (password `s3cret`) on every node, the default user off (a cluster's nodes
 * keep their ACLs each): a node that a client reaches without the URL's credentials refuses it.
 * Gives back what turns the default user on again.
 */
async function seederOnly(ports: number[]): Promise<() => Promise<void>> {
  const each = async (user: string | undefined, command: string[]): Promise<void> => {
    for (const port of ports) {
      const client = new Redis(port, "127.0.0.1", user ? { username: user, password: "s3cret" } : {});
      await client.call("ACL", "SETUSER", ...command);
      client.disconnect();
    }
  };
  await each(undefined, ["seeder", "on", ">s3cret", "~*", "&*", "+@all"]);
  await each("seeder", ["default", "off"]);
  return () => each("seeder", ["default", "on"]);
}

describe("a redis+cluster:// URL of several seeds", () => {
  const cluster = new LocalCluster();
  let dead = 0; // a port where nothing listens: a seed that is down
  const opened: EventStore[] = [];
  const open = (url: string, prefix: string, timeoutMs = 5000): EventStore => {
    const store = connect(url, { prefix, timeoutMs });
    opened.push(store);
    return store;
  };
  beforeAll(async () => {
    [dead] = await Promise.all([freePort(), cluster.start()]);
  });
  afterAll(async () => {
    await Promise.all(opened.map((store) => store.close()));
    await cluster.close();
  });
  const ports = (): number[] => cluster.nodes.map((node) => node.port);

  it("reaches the cluster when its first seed does not answer", async () => {
    const [, second = 0, third = 0] = ports();
    const store = open(seeds([dead, second]), "first-down");
    const other = open(seeds([third]), "first-down");
    expect(await writtenAndRead(store, other)).toEqual(SESSIONS.map((s) => `through ${s}`));
  });

  it("gives the URL's credentials to every seed and node", async () => {
    const unlock = await seederOnly(ports());
    try {
      const live = ports()[1] ?? 0;
      const store = open(seeds([dead, live], "seeder:s3cret@"), "credentials");
      expect(await writtenAndRead(store, store)).toEqual(SESSIONS.map((s) => `through ${s}`));
      const wrong = open(seeds([dead, live], "seeder:guessed@"), "credentials", 2000);
      const refused = await wrong.tail("seeded-0", { n: 1 }).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(BackendRefused);
      expect((refused as Error).message).toMatch(/^redis refused the credentials: WRONGPASS/);
      expect((refused as Error).message).not.toContain("guessed");
    } finally {
      await unlock();
    }
  });

  it("is unavailable within the store's timeout when no seed answers, naming each", async () => {
    const other = await freePort();
    const store = open(seeds([dead, other]), "none", 1000);
    const started = Date.now();
    const failed = await store.tail("seeded-0", { n: 1 }).catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(BackendUnavailable);
    expect(Date.now() - started).toBeLessThan(10_000);
    const message = (failed as Error).message;
    expect(message).toMatch(/^redis unreachable for 1000 ms: no node of the cluster answered \(/);
    expect(message).toContain(`127.0.0.1:${dead}: `);
    expect(message).toContain(`127.0.0.1:${other}: `);
    expect(message).not.toContain("\n");
  });

  it.each([
    ["a port that is not a number", "127.0.0.1:seven,127.0.0.1:7001", "127.0.0.1:seven"],
    ["an empty host", ":7001,127.0.0.1:7002", ":7001"],
    ["an empty seed", "127.0.0.1:7001,", ""],
    ["a port out of range", "127.0.0.1:7001,127.0.0.1:99999", "127.0.0.1:99999"],
    ["an IPv6 address without brackets", "::1:7001,127.0.0.1:7002", "::1:7001"],
  ])("refuses %s as bad input, in one line naming the URL", (_, hosts, item) => {
    const url = `redis+cluster://${hosts}/0`;
    const refused = (() => {
      try {
        connect(url);
      } catch (err) {
        return err;
      }
      return null;
    })();
    expect(refused).toBeInstanceOf(InvalidInput);
    expect((refused as Error).message).toBe(`a cluster seed is host:port, got '${item}' in '${url}'`);
  });

  it("names the URL of a bad seed without its password", () => {
    expect(() => connect("rediss+cluster://u:pa55@10.0.0.5:7001,10.0.0.6:x/0")).toThrow(
      new InvalidInput("a cluster seed is host:port, got '10.0.0.6:x' in 'rediss+cluster://u:***@10.0.0.5:7001,10.0.0.6:x/0'"),
    );
  });

  it("refuses a database other than 0, which a cluster does not have", () => {
    expect(() => connect(seeds([7001, 7002]).replace(/\/0$/, "/3"))).toThrow(InvalidInput);
  });
});

describe("a seed list as ioredis is given it", () => {
  it.each([
    [
      "rediss+cluster://u:p%40ss@10.0.0.5:7001,10.0.0.6:7002/0?ssl_ca_certs=/ca.pem",
      "rediss+cluster://u:p%40ss@10.0.0.5:7001/0?ssl_ca_certs=/ca.pem",
      [["10.0.0.5", 7001], ["10.0.0.6", 7002]],
    ],
    [
      "redis+cluster://[::1]:7001,[::1],db.internal/0",
      "redis+cluster://[::1]:7001/0",
      [["::1", 7001], ["::1", 6379], ["db.internal", 6379]],
    ],
    ["redis+cluster://10.0.0.5:7001", "redis+cluster://10.0.0.5:7001", [["10.0.0.5", 7001]]],
  ])("%s", (given, first, nodes) => {
    const read = nodesUrl(given, "a cluster seed");
    expect(read.url.href).toBe(first);
    expect(read.nodes.map((node) => [node.host, node.port])).toEqual(nodes);
  });
});

describe.skipIf(!serverHasTls())("a rediss+cluster:// URL of several seeds, with credentials", () => {
  let pki: ServerTls;
  let cluster: LocalCluster;
  beforeAll(async () => {
    pki = makePki();
    cluster = new LocalCluster(pki);
    await cluster.start();
    await seederOnly(cluster.nodes.map((node) => node.port));
  });
  afterAll(async () => {
    await cluster.close();
    rmSync(dirname(pki.ca), { recursive: true, force: true });
  });

  it("reaches the cluster over TLS through the seed that answers", async () => {
    const dead = await freePort();
    const query = `?ssl_ca_certs=${encodeURIComponent(pki.ca)}`;
    const url = seeds([dead, cluster.tlsPorts[1] ?? 0], "seeder:s3cret@", "rediss+cluster", query);
    const store = connect(url, { prefix: "tls", timeoutMs: 5000 });
    const other = connect(seeds([cluster.tlsPorts[2] ?? 0], "seeder:s3cret@", "rediss+cluster", query), {
      prefix: "tls",
      timeoutMs: 5000,
    });
    try {
      expect(await writtenAndRead(store, other)).toEqual(SESSIONS.map((s) => `through ${s}`));
    } finally {
      await Promise.all([store.close(), other.close()]);
    }
  });
});
