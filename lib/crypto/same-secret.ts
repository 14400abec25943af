import { createHmac, createSecretKey, randomBytes, timingSafeEqual } from "node:crypto"

// A key that lives as long as the process, so that two values of any lengths are compared as
// equal-length digests and neither length leaks through timingSafeEqual. A KeyObject, made once:
// createHmac tells a Buffer key from a KeyObject or CryptoKey by brand checks that fail (and so cost)
// for a Buffer, on every call (each request to the embedded API compares the process token).
const comparisonKey = createSecretKey(randomBytes(32))

/**
 * Whether a secret sent in plain (a password, a webhook token) equals the
 * expected one, in constant time: an early-exit comparison tells an attacker
 * how many leading characters were right.
 */
export function sameSecret(given: string, expected: string): boolean {
  return matchesSecret(expected)(given)
}

/**
 * sameSecret() for one expected secret checked again and again (the process
 * token, on every request to the embedded API): its digest is made once.
 */
export function matchesSecret(expected: string): (given: string) => boolean {
  const right = digest(expected)
  return (given) => timingSafeEqual(digest(given), right)
}

const digest = (value: string) => createHmac("sha256", comparisonKey).update(value).digest()
