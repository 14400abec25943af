import { Command, CommanderError } from "commander"
import { RunnelError, SystemError } from "../lib/core/errors.ts"
import { ServerRefused } from "./api-client.ts"
import { apiserverCommand } from "./apiserver.ts"
import { operatorCommand } from "./operator.ts"
import { pipelineCommand } from "./pipeline.ts"
import { runnerCommand } from "./runner.ts"
import { serverCommand } from "./server.ts"

const program = new Command()
  .name("runnel")
  .description("runnel: pipelines as code, tasks as containers")
  .showHelpAfterError("(run with --help for usage)")
  .exitOverride()
serverCommand(program)
operatorCommand(program)
apiserverCommand(program)
runnerCommand(program)
pipelineCommand(program)

try {
  await program.parseAsync(process.argv)
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode
  } else if (error instanceof ServerRefused) {
    // The server said no: its message, exit 1 (docs/decisions.md); 2 is kept for what never reached it.
    process.stderr.write(`runnel: ${error.message}\n`)
    process.exitCode = 1
  } else if (error instanceof RunnelError || error instanceof SystemError) {
    // A user's mistake or an unavailable dependency: the message says what to do; a stack trace would not.
    process.stderr.write(`runnel: ${error.message}\n`)
    process.exitCode = 2
  } else {
    throw error
  }
}
