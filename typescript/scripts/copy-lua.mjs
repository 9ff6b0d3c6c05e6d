// The Lua scripts live once in the repository, with the Python package that also runs them
// (ledger_bus/store/lua/); the npm package carries copies, made here at build and before the
// tests, which hold them byte-identical to the originals.
//
// A build can run while tests read the copies (test/package.test.ts packs the package): a copy
// already right is left alone, and one that changes is replaced by a rename, never rewritten
// in place, so that a reader sees a whole script. A copy whose original is gone is removed.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, "..", "..", "ledger_bus", "store", "lua");
const target = join(here, "..", "lua");
mkdirSync(target, { recursive: true });
// The scripts, and protocol.json, their calling convention (test/protocol.test.ts reads it).
const scripts = readdirSync(source).filter((n) => n.endsWith(".lua") || n === "protocol.json");
for (const name of scripts) {
  const [from, to] = [join(source, name), join(target, name)];
  if (existsSync(to) && readFileSync(to).equals(readFileSync(from))) continue;
  const part = `${to}.${process.pid}.part`;
  copyFileSync(from, part);
  renameSync(part, to);
}
for (const name of readdirSync(target)) {
  if (name.endsWith(".lua") && !scripts.includes(name)) rmSync(join(target, name), { force: true });
}
