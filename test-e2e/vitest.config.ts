import { defineConfig } from "vitest/config"

// The end-to-end suite: `npm run e2e` (vitest run --config test-e2e/vitest.config.ts) against the cluster
// KUBECONFIG names. The root vitest.config.ts excludes this folder, so `npm test` never needs a cluster.
export default defineConfig({
  test: {
    root: import.meta.dirname,
    include: ["**/*.test.ts"],
    globalSetup: ["./global-setup.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // One cluster, and one runnel server per file: files one after another, tests in a file in order.
    fileParallelism: false,
    pool: "forks",
  },
})
