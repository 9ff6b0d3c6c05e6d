/**
 * A private certificate authority for the rediss:// tests, made by openssl as the Python suite's
 * (tests/support/tls.py): a CA, and a server certificate it signed for 127.0.0.1.
 */

import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { serverBinary, type ServerTls } from "./servers.js";

const openssl = (dir: string, ...args: string[]): void => {
  execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
};

/** The CA and the server's certificate and key, in a new temporary directory. */
export function makePki(): ServerTls {
  const dir = mkdtempSync(join(tmpdir(), "lb-ts-pki-"));
  openssl(dir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
    "-keyout", "ca.key", "-out", "ca.pem");
  openssl(dir, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=server",
    "-keyout", "server.key", "-out", "server.csr");
  writeFileSync(join(dir, "server.ext"), "subjectAltName = IP:127.0.0.1, IP:::1\n");
  openssl(dir, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
    "-CAcreateserial", "-days", "2", "-out", "server.pem", "-extfile", "server.ext");
  return { ca: join(dir, "ca.pem"), cert: join(dir, "server.pem"), key: join(dir, "server.key") };
}

/**
 * Whether the server binary speaks TLS (the valkey-server the Python venv ships does not): asked
 * for TLS without a CA, a server built with it says it cannot configure TLS, and exits.
 */
export function serverHasTls(): boolean {
  const probe = spawnSync(serverBinary(), ["--port", "0", "--tls-port", "1", "--save", ""], {
    encoding: "utf8",
    timeout: 10_000,
  });
  return `${probe.stdout}${probe.stderr}`.includes("Failed to configure TLS");
}
