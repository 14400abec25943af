import { enableCompileCache } from "node:module"

// Node keeps the compiled code of the modules it loads (runnel's own TypeScript, stripped, and
// node_modules') in a cache directory and reuses it on the next start. bin/runnel turns the cache on
// from the first module (NODE_COMPILE_CACHE), so that a warm start never loads Node's TypeScript
// stripper; this call covers `node cli/main.ts` (npm start) from here on and does nothing when the
// cache is already on. The directory is <os.tmpdir()>/node-compile-cache unless NODE_COMPILE_CACHE
// names another, never the repository, so a read-only checkout or image works; if it cannot be
// written, Node goes on without a cache (it reports that and never throws). Entries are checked
// against a hash of each module's source, so an edited file is compiled again.
enableCompileCache()

await import("./program.ts")
