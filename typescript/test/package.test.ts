// The npm package as a user gets it: `npm pack` (which builds it, by the `prepack` script),
// the tarball installed into an empty project outside the repository, both entry points
// imported from plain Node and type-checked by a strict consumer, and an append and a read
// through it on a redis-server of the test's own. Its dependencies come from the registry
// through npm, from npm's cache when it has them.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { promisify } from "node:util";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { node22 } from "./support/node22.js";
import { LocalServer } from "./support/servers.js";

const run = promisify(execFile);
const PACKAGE = resolve(import.meta.dirname, "..");
const REPO = resolve(PACKAGE, "..");
const LUA = join(REPO, "ledger_bus", "store", "lua");
// Packing builds (tsc) and installing Pi fetches ~300 packages, on a machine of two cores
// shared with the other test files: minutes allowed, about half a minute taken.
const SLOW = 240_000;

// The child npm runs as a user's would: not as a script of this package, which `npm test`
// would otherwise tell it through the environment it passes down.
const env = Object.fromEntries(
  Object.entries(process.env).filter(
    ([name]) => !/^(npm_package_|npm_lifecycle_|npm_config_local_prefix$|INIT_CWD$)/.test(name),
  ),
);

async function npm(cwd: string, ...args: string[]): Promise<string> {
  const done = await run("npm", [...args, "--no-audit", "--no-fund", "--prefer-offline"], {
    cwd,
    env,
    maxBuffer: 64 * 1024 * 1024,
  });
  return done.stdout;
}

/** A module of the consumer project run by plain Node, its stdout's last line as JSON. */
async function node(cwd: string, file: string, url: string, executable = process.execPath): Promise<Record<string, unknown>> {
  const done = await run(executable, [file], { cwd, env: { ...env, LEDGER_BUS_URL: url } });
  return JSON.parse(done.stdout.trim().split("\n").at(-1) ?? "null") as Record<string, unknown>;
}

// What a user's code does first: import, connect, append, read (the read through the Lua
// script the package carries), then try the Pi entry point.
const MAIN = `
import { connect, streamId, VersionConflict } from "ledger-bus";

const store = connect(process.env.LEDGER_BUS_URL, { prefix: \`pkg-\${process.pid}\`, timeoutMs: 5000 });
const ref = streamId("package", "main");
const done = await store.append(ref, 0, "a1", [{ type: "message", agent: "node", body: "from the tarball" }]);
const read = await store.readStream(ref);
const conflict = await store.append(ref, 0, "a2", [{ type: "message", agent: "node", body: "late" }])
  .then(() => "none", (err) => err instanceof VersionConflict ? "VersionConflict" : String(err));
await store.close();
const pi = await import("ledger-bus/pi").then(() => "imported", (err) => \`\${err.code}: \${err.message}\`);
console.log(JSON.stringify({ version: done.lastVersion, bodies: read.map((e) => e.fields.body), conflict, pi }));
`;

const WITH_PI = `
import { connect, streamId } from "ledger-bus";
import { PiLedger } from "ledger-bus/pi";

const store = connect(process.env.LEDGER_BUS_URL, { prefix: "pkg-pi", timeoutMs: 5000 });
const pi = await PiLedger.open(store, { session: "package", cwd: process.cwd() });
await pi.close();
const kinds = (await store.readStream(streamId("package", pi.streamName))).map((e) => e.fields.kind);
await store.close();
console.log(JSON.stringify({ kinds }));
`;

// A strict consumer of both entry points. The package's types must be what they say, not
// any: each @ts-expect-error below is an error only if they are (an unused one fails tsc).
const CONSUMER = `
import type { SessionManager } from "@earendil-works/pi-coding-agent";
import { connect, streamId, type AppendResult, type EventStore, type RecordedEvent } from "ledger-bus";
import { PiLedger } from "ledger-bus/pi";

export async function use(url: string): Promise<number> {
  const store: EventStore = connect(url, { prefix: "typed", durability: "local" });
  const ref = streamId("s", "main");
  const done: AppendResult = await store.append(ref, 0, "a1", [{ type: "message", agent: "a", body: "hi" }]);
  const read: RecordedEvent[] = await store.readStream(ref);
  const pi: PiLedger = await PiLedger.open(store, { session: "s" });
  const manager: SessionManager = pi.sessionManager;
  // @ts-expect-error: a version is a number
  const version: string = done.lastVersion;
  // @ts-expect-error: Pi's session manager, typed by the peer
  const notManager: number = manager;
  // @ts-expect-error: connect's options are typed
  connect(url, { prefix: 1 });
  await pi.close();
  await store.close();
  return read.length + version.length + notManager;
}
`;

const TSCONFIG = {
  compilerOptions: {
    strict: true,
    module: "nodenext",
    moduleResolution: "nodenext",
    target: "es2023",
    types: ["node"],
    noEmit: true,
    // The declarations of the packages under Pi's do not all check under strict settings
    // (types of optional peers they never install); the consumer's own file is what is checked.
    skipLibCheck: true,
  },
  files: ["consumer.ts"],
};

const installedVersion = (name: string): string =>
  (JSON.parse(readFileSync(join(PACKAGE, "node_modules", name, "package.json"), "utf8")) as { version: string }).version;

describe("the npm package, installed from its tarball", () => {
  const server = new LocalServer();
  const work = mkdtempSync(join(tmpdir(), "lb-ts-package-"));
  const project = join(work, "consumer");
  let files: string[] = [];

  beforeAll(async () => {
    expect(relative(REPO, work).startsWith("..")).toBe(true); // outside the repository
    // dist/ is what packing must make: one left by an earlier build must not stand in for it.
    rmSync(join(PACKAGE, "dist"), { recursive: true, force: true });
    const [packed] = await Promise.all([npm(PACKAGE, "pack", "--json", "--pack-destination", work), server.start()]);
    const [tarball] = JSON.parse(packed) as { filename: string; files: { path: string }[] }[];
    files = tarball?.files.map((file) => file.path) ?? [];
    mkdirSync(project);
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
    await npm(project, "install", join(work, tarball?.filename ?? "missing.tgz"));
  }, SLOW);

  afterAll(async () => {
    await server.close();
    rmSync(work, { recursive: true, force: true });
  });

  it("ships the build, its types, the Lua scripts and their protocol.json, and no tests or sources", () => {
    const manifest = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8")) as {
      exports: Record<string, { types: string; import: string }>;
    };
    for (const entry of Object.values(manifest.exports)) {
      expect(files).toContain(entry.import.replace(/^\.\//, ""));
      expect(files).toContain(entry.types.replace(/^\.\//, ""));
    }
    const scripts = readdirSync(LUA).filter((name) => name.endsWith(".lua") || name === "protocol.json").sort();
    expect(files.filter((path) => path.startsWith("lua/")).sort()).toEqual(scripts.map((name) => `lua/${name}`));
    for (const name of scripts) {
      const installed = readFileSync(join(project, "node_modules", "ledger-bus", "lua", name));
      expect(installed.equals(readFileSync(join(LUA, name))), name).toBe(true);
    }
    // Nothing else: the compiled modules, their declarations and maps, the scripts, the manifest.
    const shipped = /^(dist\/src\/.+\.(js|d\.ts|js\.map)|lua\/([^/]+\.lua|protocol\.json)|README\.md|package\.json)$/;
    expect(files.filter((path) => !shipped.test(path))).toEqual([]);
    expect(files.filter((path) => /(^|\/)test\/|\.test\./.test(path))).toEqual([]);
  });

  it("runs from plain Node without the Pi peer, whose entry point then names it", async () => {
    writeFileSync(join(project, "main.mjs"), MAIN);
    const out = await node(project, "main.mjs", server.url);
    expect(out).toMatchObject({ version: 1, bodies: ["from the tarball"], conflict: "VersionConflict" });
    // ledger-bus/pi is Pi's own SessionManager with the ledger as its storage: without Pi it
    // cannot load, and says which package it needs.
    expect(out["pi"]).toMatch(/^ERR_MODULE_NOT_FOUND: Cannot find package '@earendil-works\/pi-coding-agent'/);
  });

  it("with Pi 0.73 (its old name) installed, the Pi entry point still names the Pi 1.x it needs", async () => {
    // Pi 0.73 was @mariozechner/pi-coding-agent: the adapter is written against 1.x alone.
    await npm(project, "install", "@mariozechner/pi-coding-agent@0.73.1");
    const out = await node(project, "main.mjs", server.url);
    expect(out["pi"]).toMatch(/^ERR_MODULE_NOT_FOUND: Cannot find package '@earendil-works\/pi-coding-agent'/);
  }, SLOW);

  describe("with the Pi peer installed", () => {
    beforeAll(async () => {
      // The versions the repository tests against, so that npm's cache has them.
      const pi = `@earendil-works/pi-coding-agent@${installedVersion("@earendil-works/pi-coding-agent")}`;
      await npm(project, "install", pi, `@types/node@${installedVersion("@types/node")}`);
    }, SLOW);

    it("imports both entry points from plain Node and keeps a Pi session in Redis", async () => {
      // On the Node Pi 1.x needs (22.19 or newer): on Node 20 Pi itself does not load.
      writeFileSync(join(project, "pi.mjs"), WITH_PI);
      expect(await node(project, "pi.mjs", server.url, node22())).toEqual({ kinds: ["pi.session", "run.started", "run.finished"] });
      expect((await node(project, "main.mjs", server.url, node22()))["pi"]).toBe("imported");
    }, SLOW);

    it("type-checks a strict consumer with the repository's tsc against the installed types", async () => {
      writeFileSync(join(project, "consumer.ts"), CONSUMER);
      writeFileSync(join(project, "tsconfig.json"), JSON.stringify(TSCONFIG));
      const tsc = join(PACKAGE, "node_modules", ".bin", "tsc");
      expect(existsSync(tsc)).toBe(true);
      const checked = await run(tsc, ["-p", project], { cwd: project }).then(
        () => "",
        (err: unknown) => String((err as { stdout?: string }).stdout ?? err),
      );
      expect(checked).toBe("");
    }, SLOW);
  });
});
