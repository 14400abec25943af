import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["**/*.test.ts"],
    exclude: ["node_modules/**", "test-e2e/**"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Docker tests share one daemon on two cores; files in parallel, tests in a file in order.
    fileParallelism: true,
    maxWorkers: 2,
    pool: "forks",
  },
})
