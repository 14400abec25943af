// Preloaded with `node --import` by test/command-imports.test.ts: writes the npm packages the process
// loaded, one a line, to the file named by RUNNEL_TEST_LOADED_PACKAGES when it exits.
import { writeFileSync } from "node:fs"
import { registerHooks } from "node:module"

const packages = new Set<string>()
registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context)
    const match = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(resolved.url)
    if (match?.[1] !== undefined) packages.add(match[1])
    return resolved
  },
})
process.on("exit", () => {
  const file = process.env.RUNNEL_TEST_LOADED_PACKAGES
  if (file !== undefined) writeFileSync(file, [...packages].sort().join("\n"))
})
