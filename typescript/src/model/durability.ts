/**
 * What an append waits for before it is acknowledged (the Python package's
 * ledger_bus/model/durability.py): `local`, `replicas:N` (WAIT), `aof` (WAITAOF: the primary's
 * AOF fsynced) or `aof+replicas:N`, each with how long it waits before the append is reported
 * written but not confirmed (DurabilityNotConfirmed).
 */

import { InvalidInput } from "./errors.js";
import { quoted } from "./ids.js";

export const DEFAULT_DURABILITY_TIMEOUT_MS = 1000;
const LEVEL = /^(local|aof|replicas:([1-9][0-9]?)|aof\+replicas:([1-9][0-9]?))$/;

export interface Durability {
  readonly replicas: number;
  readonly aof: boolean;
  readonly timeoutMs: number;
}

export const LOCAL: Durability = Object.freeze({ replicas: 0, aof: false, timeoutMs: DEFAULT_DURABILITY_TIMEOUT_MS });

export function durabilityName(level: Durability): string {
  if (level.aof) return level.replicas ? `aof+replicas:${level.replicas}` : "aof";
  return level.replicas ? `replicas:${level.replicas}` : "local";
}

export function isLocal(level: Durability): boolean {
  return !level.replicas && !level.aof;
}

/** `local`, `replicas:N`, `aof` or `aof+replicas:N` (N from 1 to 99); InvalidInput else. */
export function parseDurability(text: unknown, timeoutMs = DEFAULT_DURABILITY_TIMEOUT_MS): Durability {
  const match = typeof text === "string" ? LEVEL.exec(text.trim()) : null;
  if (match === null) {
    throw new InvalidInput(`durability must be local, replicas:N, aof or aof+replicas:N; got ${quoted(text)}`);
  }
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) {
    throw new InvalidInput(`durability timeout must be an int of milliseconds >= 1: ${quoted(timeoutMs)}`);
  }
  const replicas = Number(match[2] ?? match[3] ?? 0);
  return Object.freeze({ replicas, aof: (text as string).trim().startsWith("aof"), timeoutMs });
}
