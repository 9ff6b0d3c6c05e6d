import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Pi 1.x needs Node 22.19: its tests run there, by vitest.pi.config.ts (`npm run test:pi`).
    exclude: ["test/pi*.test.ts", "**/node_modules/**"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Each file starts servers of its own; two at a time suit a two-core machine.
    maxWorkers: 2,
  },
});
