// The Lua scripts live once in the repository, with the Python package that also runs them
// (ledger_bus/store/lua/); the npm package carries copies, made here at build and before the
// tests, which hold them byte-identical to the originals.
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, "..", "..", "ledger_bus", "store", "lua");
const target = join(here, "..", "lua");
mkdirSync(target, { recursive: true });
for (const name of readdirSync(source).filter((n) => n.endsWith(".lua"))) {
  copyFileSync(join(source, name), join(target, name));
}
