import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // @langchain/langgraph-checkpoint-validation calls describe/it/beforeAll as globals.
    globals: true,
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 60000,
    hookTimeout: 60000,
    // One sidecar process serves every file; keep the 2-core machine calm.
    maxWorkers: 2,
  },
});
