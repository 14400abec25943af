await import("./program.ts")
