/**
 * The Lua scripts, each with the SHA1 EVALSHA calls it by: the copies the package carries of the
 * repository's one set (ledger_bus/store/lua/, copied by scripts/copy-lua.mjs).
 */

import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export interface LuaScript {
  readonly name: string;
  readonly text: string;
  readonly sha: string;
}

/** The package's lua/ directory, found above this module (src/store/ or dist/src/store/). */
export function luaDirectory(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let up = 0; up < 5; up++) {
    const candidate = join(dir, "lua");
    if (existsSync(join(candidate, "append.lua"))) return candidate;
    dir = dirname(dir);
  }
  throw new Error("the package's lua/ scripts are missing: run `npm run lua` (or build)");
}

const loaded = new Map<string, LuaScript>();

export function script(name: string): LuaScript {
  let found = loaded.get(name);
  if (found === undefined) {
    const text = readFileSync(join(luaDirectory(), `${name}.lua`), "utf8");
    found = { name, text, sha: createHash("sha1").update(text, "utf8").digest("hex") };
    loaded.set(name, found);
  }
  return found;
}
