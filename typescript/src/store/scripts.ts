/**
 * The Lua scripts, each with the SHA1 EVALSHA calls it by: the copies the package carries of the
 * repository's one set (ledger_bus/store/lua/, copied by scripts/copy-lua.mjs). A script is read
 * from disk when it is first used, not when this module is imported: importing the package
 * touches no file.
 */

import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

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

/** One script of lua/, by its name; its text and SHA1 read when first asked for. */
export class LuaScript {
  private source: { text: string; sha: string } | undefined;

  constructor(readonly name: string) {}

  get text(): string {
    return this.load().text;
  }

  get sha(): string {
    return this.load().sha;
  }

  private load(): { text: string; sha: string } {
    if (this.source === undefined) {
      const text = readFileSync(join(luaDirectory(), `${this.name}.lua`), "utf8");
      this.source = { text, sha: createHash("sha1").update(text, "utf8").digest("hex") };
    }
    return this.source;
  }
}

const named = new Map<string, LuaScript>();

/** The script `name` (e.g. "append"), one object per name; nothing is read until it is used. */
export function script(name: string): LuaScript {
  let found = named.get(name);
  if (found === undefined) named.set(name, (found = new LuaScript(name)));
  return found;
}
