// The stores every contract test runs over: memory, a redis-server of the tests' own, and a
// three-node cluster; each test gets an empty store (a fresh key prefix on the servers).
import { randomBytes } from "node:crypto";

import { afterAll, beforeAll } from "vitest";

import { connect, type ConnectedStore } from "../../src/index.js";
import { LocalCluster, LocalServer } from "./servers.js";

export type Kind = "memory" | "redis" | "cluster";
export const KINDS: Kind[] = ["memory", "redis", "cluster"];

/** Start what `kinds` need before the file's tests, stop it after; `open(kind)` gives a store. */
export function stores(kinds: Kind[] = KINDS): { open: (kind: Kind) => ConnectedStore; url: (kind: Kind) => string } {
  let server: LocalServer | null = null;
  let cluster: LocalCluster | null = null;
  const opened: ConnectedStore[] = [];
  beforeAll(async () => {
    const starting: Promise<unknown>[] = [];
    if (kinds.includes("redis")) starting.push((server = new LocalServer()).start());
    if (kinds.includes("cluster")) starting.push((cluster = new LocalCluster()).start());
    await Promise.all(starting);
  });
  afterAll(async () => {
    await Promise.all(opened.map((store) => store.close()));
    await server?.close();
    await cluster?.close();
  });
  const url = (kind: Kind): string =>
    kind === "memory" ? "memory://" : kind === "redis" ? (server as LocalServer).url : (cluster as LocalCluster).url;
  return {
    url,
    open: (kind) => {
      const store = connect(url(kind), { prefix: `t${randomBytes(4).toString("hex")}`, timeoutMs: 5000 });
      opened.push(store);
      return store;
    },
  };
}
