import { defineConfig } from "vitest/config";

import base from "./vitest.config.js";

// Pi 1.x's tests, run on Node 22.19 or newer (`npm run test:pi` starts them there): Pi's engines
// ask for it, while the rest of the SDK's tests keep Node 20.
export default defineConfig({
  test: { ...base.test, include: ["test/pi*.test.ts"], exclude: [] },
});
