import type { Command } from "commander"
import { envName, type FlagSpec } from "../lib/config/flags.ts"

/** Adds a flag table to a command; --help shows each flag's variable and default. */
export function addFlags(command: Command, table: readonly FlagSpec[]): void {
  for (const flag of table) {
    const syntax = `${flag.short === undefined ? "" : `-${flag.short}, `}--${flag.name}${flag.value === undefined ? "" : ` <${flag.value}>`}`
    const help = `${flag.description} (env ${envName(flag)}${flag.defaultValue === undefined ? "" : `, default ${flag.defaultValue}`})`
    if (flag.repeatable) {
      command.option(syntax, help, (value: string, previous: string[] = []) => [...previous, value])
    } else {
      command.option(syntax, help)
    }
  }
}
