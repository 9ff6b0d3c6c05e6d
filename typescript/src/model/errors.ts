/**
 * The one error hierarchy every store raises, named and meant as the Python package's
 * (ledger_bus.model.errors): callers catch `LedgerError`.
 */

export class LedgerError extends Error {
  override name = "LedgerError";
}

/** An argument is malformed: a session id, a version, a cursor. */
export class InvalidInput extends LedgerError {
  override name = "InvalidInput";
}

/** An event breaks the vocabulary or a limit; nothing of its append is written. */
export class InvalidEvent extends InvalidInput {
  override name = "InvalidEvent";
  readonly reason: string;
  readonly index: number | undefined;
  readonly field: string | undefined;

  constructor(reason: string, where: { index?: number; field?: string } = {}) {
    const { index, field } = where;
    const parts: string[] = [];
    if (index !== undefined) parts.push(`event ${index}`);
    if (field) parts.push(`field '${field}'`);
    super(parts.length ? `${parts.join(", ")}: ${reason}` : reason);
    this.reason = reason;
    this.index = index;
    this.field = field;
  }
}

/** `expectedVersion` is not the stream's version; nothing is written. */
export class VersionConflict extends LedgerError {
  override name = "VersionConflict";
  constructor(
    readonly stream: string,
    readonly expected: number,
    readonly actual: number,
    message?: string,
  ) {
    super(message ?? `stream ${stream}: expected version ${expected}, actual ${actual}`);
  }
}

/**
 * A stream holds fewer events than this writer saw acknowledged: a failover lost acknowledged
 * events. Nothing is written; `accept()` takes the history as it now is.
 */
export class HistoryRewound extends VersionConflict {
  override name = "HistoryRewound";
  constructor(
    stream: string,
    acknowledged: number,
    actual: number,
    readonly accept: () => void = () => undefined,
  ) {
    super(
      stream,
      acknowledged,
      actual,
      `stream ${stream}: version ${acknowledged} was acknowledged to this writer, the stream` +
        ` now has ${actual} events: history was rewound (a failover lost acknowledged events);` +
        " nothing written",
    );
  }
}

/** An appendId already used on a stream arrived with other content. */
export class IdempotencyConflict extends LedgerError {
  override name = "IdempotencyConflict";
  constructor(
    readonly stream: string,
    readonly appendId: string,
  ) {
    super(`stream ${stream}: appendId '${appendId}' was already used for different events`);
  }
}

/** The backend could not be reached within the configured deadline. */
export class BackendUnavailable extends LedgerError {
  override name = "BackendUnavailable";
}

/**
 * The backend answered but refused the work: memory full, no permission, wrong credentials.
 * Retrying as it is will not help.
 */
export class BackendRefused extends LedgerError {
  override name = "BackendRefused";
}

/** A rule refused a write that names something closed already. Nothing was written. */
export class Refused extends LedgerError {
  override name = "Refused";
}

/** An append to a session moved to the archive, which holds it read-only now. */
export class SessionArchived extends Refused {
  override name = "SessionArchived";
  constructor(
    readonly sessionId: string,
    readonly archive: string,
  ) {
    super(`session '${sessionId}' is archived in ${archive}; it takes no more appends`);
  }
}

/**
 * A write made under a lease whose holding is over: it expired, or another process took the
 * lease and drew a newer token. Nothing was written, and the writer may not write under that
 * holding any more. `token` is the lease's current token (0: none drawn).
 */
export class LeaseLost extends Refused {
  override name = "LeaseLost";
  constructor(
    message: string,
    readonly token = 0,
  ) {
    super(message);
  }
}

/** What a call names does not exist: a session, stream, attempt or group. */
export class NotFound extends LedgerError {
  override name = "NotFound";
}

/**
 * The append was written on the primary but the durability asked for (replicas, AOF) was not
 * confirmed in time. Retrying with the same appendId is safe.
 */
export class DurabilityNotConfirmed extends LedgerError {
  override name = "DurabilityNotConfirmed";
  constructor(
    message: string,
    readonly result: unknown,
  ) {
    super(message);
  }
}

/**
 * A store lacks a capability a caller needs (store/capabilities.ts): consumer groups, say, of
 * a store that keeps only the log. Nothing was done, and asking again will not help.
 */
export class Unsupported extends BackendRefused {
  override name = "Unsupported";
}

/**
 * A Lua script replied in a shape its parser (store/replies.ts) does not know: the server runs
 * other scripts than this SDK's. Nothing is made of the reply.
 */
export class UnexpectedReply extends BackendRefused {
  override name = "UnexpectedReply";
}
