import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Each file starts servers of its own; two at a time suit a two-core machine.
    maxWorkers: 2,
  },
});
