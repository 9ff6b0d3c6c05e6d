// One copy of each Lua script in the repository: the package's copies are the Python
// package's, byte for byte.
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";

import { expect, it } from "vitest";

import { luaDirectory } from "../src/store/scripts.js";

const ORIGINALS = resolve(import.meta.dirname, "..", "..", "ledger_bus", "store", "lua");

it("the package carries every script of the repository, byte-identical", () => {
  const originals = readdirSync(ORIGINALS).filter((n) => n.endsWith(".lua")).sort();
  const copies = readdirSync(luaDirectory()).filter((n) => n.endsWith(".lua")).sort();
  expect(copies).toEqual(originals);
  for (const name of originals) {
    expect(readFileSync(join(luaDirectory(), name)).equals(readFileSync(join(ORIGINALS, name))), name).toBe(true);
  }
});
