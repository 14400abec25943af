/** Addresses of tasks inside a run (contract.md section 4). */

/** The script's own console output is stored as this task. */
export const consoleTaskPath = "pipeline/console"

/** `tasks/<n>/<name>`: n counts `runtime.run` calls from 1 in the order they start. */
export function scriptTaskPath(n: number, name: string): string {
  return `tasks/${n}/${name}`
}
