import { type Command, Option } from "commander"
import { envName, type FlagSpec } from "../lib/config/flags.ts"

/** The image YAML pipelines run their small tasks and mock `mirror_self` images in (runner and operator). */
export const mockImageFlag: FlagSpec = {
  name: "mock-image",
  value: "IMAGE",
  defaultValue: "busybox",
  description:
    "YAML pipelines: the image with a POSIX shell that stands for a mock resource's mirror_self image and runs runnel's small file tasks",
}

/** Adds a flag table to a command; --help shows each flag's variable and default. */
export function addFlags(command: Command, table: readonly FlagSpec[]): void {
  for (const flag of table) {
    const syntax = `${flag.short === undefined ? "" : `-${flag.short}, `}--${flag.name}${flag.value === undefined ? "" : ` <${flag.value}>`}`
    const help = `${flag.description} (env ${envName(flag)}${flag.defaultValue === undefined ? "" : `, default ${flag.defaultValue}`}${flag.alias === undefined ? "" : `; also --${flag.alias}`})`
    if (flag.repeatable) {
      command.option(syntax, help, (value: string, previous: string[] = []) => [...previous, value])
    } else {
      command.option(syntax, help)
    }
    if (flag.alias !== undefined) {
      command.addOption(new Option(`--${flag.alias}${flag.value === undefined ? "" : ` <${flag.value}>`}`).hideHelp())
    }
  }
}
