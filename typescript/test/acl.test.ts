// The store under the writer role the repository ships (deploy/users.acl, made by `ledger-bus
// acl`): scripts run by EVALSHA, loaded by SCRIPT LOAD when the server has lost them (a restart,
// SCRIPT FLUSH), never by EVAL, which the roles do not grant.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";

import { connect, type ConnectedStore, streamId } from "../src/index.js";
import { msg } from "./support/events.js";
import { LocalServer } from "./support/servers.js";

const USERS = resolve(import.meta.dirname, "..", "..", "deploy", "users.acl");

const server = new LocalServer();
let admin: Redis;
let store: ConnectedStore;

beforeAll(async () => {
  await server.start();
  admin = new Redis(server.url);
  const writer = readFileSync(USERS, "utf8")
    .split("\n")
    .find((line) => line.startsWith("user ledger-writer "));
  if (writer === undefined) throw new Error(`no ledger-writer in ${USERS}`);
  // The shipped line, switched on with a password: its rules as they are.
  const rules = writer.split(" ").slice(2).map((rule) => (rule === "off" ? "on" : rule));
  await admin.call("ACL", "SETUSER", "ledger-writer", ">secret", ...rules);
  store = connect(`redis://ledger-writer:secret@127.0.0.1:${server.port}/0`);
});

afterAll(async () => {
  await store.close();
  admin.disconnect();
  await server.close();
});

it("every script runs again after the server lost its scripts, under the writer role", async () => {
  const main = streamId("acl-1", "main");
  const flushed = async (): Promise<void> => {
    await admin.script("FLUSH");
  };
  await flushed();
  expect(await store.lease("acquire", "acl-1", "run-r1", "me", 10_000)).toBeGreaterThanOrEqual(1);
  await flushed();
  expect((await store.append(main, 0, "a1", [msg("one")])).firstVersion).toBe(1);
  await flushed();
  expect((await store.readStream(main)).map((e) => e.version)).toEqual([1]);
  await flushed();
  expect(await store.lease("release", "acl-1", "run-r1", "me", 0)).toBe(1);
});
