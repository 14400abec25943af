import { type Command, Option } from "commander"
import { envName, type FlagSpec } from "../lib/config/flags.ts"

/** Gathers the values of a repeatable option in the order given. */
export const collect = (value: string, previous: string[] = []): string[] => [...previous, value]

/** Adds a flag table to a command; --help shows each flag's variable and default. */
export function addFlags(command: Command, table: readonly FlagSpec[]): void {
  for (const flag of table) {
    const syntax = `${flag.short === undefined ? "" : `-${flag.short}, `}--${flag.name}${flag.value === undefined ? "" : ` <${flag.value}>`}`
    const help = `${flag.description} (env ${envName(flag)}${flag.defaultValue === undefined ? "" : `, default ${flag.defaultValue}`}${flag.alias === undefined ? "" : `; also --${flag.alias}`})`
    if (flag.repeatable) {
      command.option(syntax, help, collect)
    } else {
      command.option(syntax, help)
    }
    if (flag.alias !== undefined) {
      command.addOption(new Option(`--${flag.alias}${flag.value === undefined ? "" : ` <${flag.value}>`}`).hideHelp())
    }
  }
}
