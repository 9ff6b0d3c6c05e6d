/**
 * Fences: a lease as its holder holds it (the Python package's `Fence`, ledger_bus/model/
 * prepared.py). Each new holding of a lease draws the next token (lease.lua); an append made
 * under a fence is refused with LeaseLost, atomically and writing nothing, once that holding
 * is over, so a process stopped past its lease writes nothing more, whatever it had queued.
 */

import { InvalidInput, LeaseLost } from "./errors.js";
import { checkName, quoted } from "./ids.js";

/** A lease as its holder holds it: `append(..., { fence })` lands only while it lasts. */
export interface Fence {
  /** The lease's name, within the session of the stream appended to. */
  readonly lease: string;
  /** Who holds it, as the lease was acquired by. */
  readonly owner: string;
  /** The holding's token, as `lease("acquire", ...)` returned it (>= 1). */
  readonly token: number;
}

/** `fence` as a store can check it (a frozen copy), else InvalidInput. */
export function checkFence(fence: unknown): Fence {
  if (typeof fence !== "object" || fence === null) {
    throw new InvalidInput(`fence must be a { lease, owner, token } object, got ${quoted(fence)}`);
  }
  const { lease, owner, token } = fence as Record<string, unknown>;
  checkName(lease, "lease name");
  // The owner is any token the holder chose (a uuid, a host and pid); the lease names it whole.
  checkName(owner, "lease owner");
  if (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1) {
    throw new InvalidInput(`a fence's token is an int >= 1, got ${quoted(token)}`);
  }
  return Object.freeze({ lease: lease as string, owner: owner as string, token });
}

/**
 * The refusal of an append made under `fence` once the lease's current token is `token` (0:
 * nobody drew one), worded as the Python package's: whether another holding took the lease, or
 * it expired with nobody taking it.
 */
export function leaseLost(fence: Fence, token: number): LeaseLost {
  const now = token > fence.token ? `another holding took it (token ${token})` : "it expired";
  return new LeaseLost(
    `lease ${fence.lease}: the holding of ${fence.owner} (token ${fence.token}) is over, ${now}; nothing written`,
    token,
  );
}
