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
    // The bundled client-node (lib/kube/client-node.js, 4 MiB, generated) loads as Node loads it, not
    // through Vite's transform, like the package it is made from.
    server: { deps: { external: [/lib\/kube\/client-node\.js$/] } },
  },
})
