/**
 * The driving side of test/support/peer.ts: a Node process of the SDK, a JSON request a line on
 * its stdin and a reply a line on its stdout (tests/support/node.py's NodePeer, in TypeScript),
 * for the tests that stop and continue a process holding a lease.
 */

import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { resolve } from "node:path";
import { createInterface } from "node:readline";

const TYPESCRIPT = resolve(import.meta.dirname, "..", "..");

/** A request the peer answered with an error: its class name and its message. */
export class PeerError extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(`${kind}: ${message}`);
    this.name = "PeerError";
  }
}

/** What a peer answers: a value, or the error it met. */
export type Reply = { ok: unknown } | { error: string; message: string };

export class NodePeer {
  readonly process: ChildProcessWithoutNullStreams;
  private readonly lines: string[] = [];
  private readonly waiting: ((line: string | undefined) => void)[] = [];
  private gone = false;
  private stderr = "";

  /** `node peer.ts URL PREFIX` on `node` (this test's own unless said: Pi's needs Node 22). */
  constructor(url: string, prefix: string, node = process.execPath) {
    this.process = spawn(node, ["--import", "tsx", "test/support/peer.ts", url, prefix], { cwd: TYPESCRIPT });
    createInterface({ input: this.process.stdout }).on("line", (line) => {
      const waiter = this.waiting.shift();
      if (waiter) waiter(line);
      else this.lines.push(line);
    });
    this.process.stderr.on("data", (chunk: Buffer) => {
      this.stderr += chunk.toString();
    });
    this.process.on("exit", () => {
      this.gone = true;
      for (const waiter of this.waiting.splice(0)) waiter(undefined);
    });
  }

  /** Write a request without waiting for its reply: queued on stdin, even while stopped. */
  send(op: string, fields: Record<string, unknown> = {}): void {
    this.process.stdin.write(`${JSON.stringify({ op, ...fields })}\n`);
  }

  /** The next reply, in the order the requests were sent. */
  async reply(timeoutMs = 30_000): Promise<Reply> {
    const queued = this.lines.shift();
    const line =
      queued ??
      (this.gone
        ? undefined
        : await new Promise<string | undefined>((done, fail) => {
            const timer = setTimeout(() => { fail(new Error(`no reply within ${timeoutMs} ms`)); }, timeoutMs);
            this.waiting.push((got) => {
              clearTimeout(timer);
              done(got);
            });
          }));
    if (line === undefined) throw new Error(`the peer exited: ${this.stderr.trim().split("\n").slice(-5).join(" | ")}`);
    return JSON.parse(line) as Reply;
  }

  /** A request and its value; PeerError when it was refused. */
  async ask(op: string, fields: Record<string, unknown> = {}): Promise<unknown> {
    this.send(op, fields);
    return valueOf(await this.reply());
  }

  stop(): void {
    this.process.kill("SIGSTOP");
  }

  resume(): void {
    this.process.kill("SIGCONT");
  }

  async close(): Promise<void> {
    if (this.gone) return;
    const exited = new Promise((done) => this.process.once("exit", done));
    this.resume(); // a stopped process would never read the end of its input
    this.process.stdin.end();
    const timer = setTimeout(() => this.process.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  }
}

/** A reply's value, or its error thrown as PeerError. */
export function valueOf(reply: Reply): unknown {
  if ("error" in reply) throw new PeerError(reply.error, reply.message);
  return reply.ok;
}
