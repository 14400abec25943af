import { randomUUID } from "node:crypto"
import { chmodSync, closeSync, fsyncSync, linkSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs"
import { errorMessage, SystemError } from "../core/errors.ts"
import { keyBytes, randomKey } from "./sealer.ts"

/** A key file holds an AES-256 key as one line of base64 (44 characters), so it can be copied into a Kubernetes Secret as is. */
const keyFilePattern = /^[A-Za-z0-9+/]{43}=$/

/** How messages name a key file: `(file) => \`the secrets key file "${file}"\``. */
export type KeyFileName = (file: string) => string

/**
 * The key in `file`, or undefined when there is no such file. A file that
 * does not hold a key is an error that never quotes its content, which may
 * be close to one.
 */
export function readKeyFile(file: string, named: KeyFileName): Buffer | undefined {
  let text: string
  try {
    text = readFileSync(file, "utf8").trim()
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined
    throw new SystemError(`cannot read ${named(file)}: ${errorMessage(error)}`, { cause: error })
  }
  if (!keyFilePattern.test(text)) {
    throw new SystemError(`${named(file)} does not hold a key: it must hold ${keyBytes} random bytes in base64`)
  }
  return Buffer.from(text, "base64")
}

/**
 * Writes a new random key to `file`, readable by its owner alone (mode 0600).
 * The key goes to a temporary file first, which is then linked into place;
 * linking fails if the file exists, so of two processes creating it at once
 * one wins and the other reads the winner's key, never a half-written file.
 */
export function createKeyFile(file: string, named: KeyFileName): Buffer {
  const key = randomKey()
  const temp = `${file}.${randomUUID()}.tmp`
  try {
    const fd = openSync(temp, "wx", 0o600)
    try {
      writeSync(fd, `${key.toString("base64")}\n`)
      fsyncSync(fd)
    } finally {
      closeSync(fd)
    }
    // The umask only takes permissions away, but a filesystem may ignore the mode given to open().
    chmodSync(temp, 0o600)
    linkSync(temp, file)
    return key
  } catch (error) {
    key.fill(0)
    if ((error as NodeJS.ErrnoException).code === "EEXIST") {
      const winner = readKeyFile(file, named)
      if (winner !== undefined) return winner
    }
    throw new SystemError(`cannot create ${named(file)}: ${errorMessage(error)}`, { cause: error })
  } finally {
    try {
      unlinkSync(temp)
    } catch {
      // Never created, or already gone.
    }
  }
}

/**
 * The key kept in `file`. A missing file gets a new random key only when
 * `mayCreate`: a store that already holds values sealed with a key must never
 * be given a new one, which could not open them; `missing()` is thrown then,
 * saying what to restore.
 */
export function keyFromFile(
  file: string,
  named: KeyFileName,
  options: { readonly mayCreate: boolean; readonly missing: () => Error },
): Buffer {
  const existing = readKeyFile(file, named)
  if (existing !== undefined) return existing
  if (!options.mayCreate) throw options.missing()
  return createKeyFile(file, named)
}
