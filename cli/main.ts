import { enableCompileCache } from "node:module"

// Node keeps the compiled code of the modules loaded after this line (runnel's own, type-stripped, and
// node_modules') in a cache directory and reuses it on the next start: `runnel server` loads about a
// thousand modules, client-node's among them, and starts markedly faster from a warm cache. The
// directory is <os.tmpdir()>/node-compile-cache (NODE_COMPILE_CACHE overrides it), never the
// repository, so a read-only checkout or image works; if the directory cannot be written, Node goes on
// without a cache (enableCompileCache reports that and never throws), and stale entries are rejected
// by a hash of each module's source.
enableCompileCache()

await import("./program.ts")
