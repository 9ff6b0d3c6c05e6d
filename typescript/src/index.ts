/**
 * ledger-bus: a durable, append-only event log for multi-agent systems on Redis Streams. The
 * TypeScript SDK: the same contract, Redis layout and Lua scripts as the Python package, so
 * that agents in either language write and read one record.
 */

export { connect, type ConnectOptions, type ConnectedStore } from "./connect.js";
export { EventStore, PAGE } from "./store/base.js";
export {
  type AppendOptions,
  type Attempts,
  type Capability,
  type CapabilityOf,
  capabilitiesOf,
  type Declared,
  type Groups,
  has,
  type IterOptions,
  type LeaseStep,
  type Log,
  need,
  type ReadOptions,
  type ReadStreamOptions,
  type ScanOptions,
  type SessionsOptions,
  type TailOptions,
  type WaitOptions,
} from "./store/capabilities.js";
export { RedisStore, type RedisStoreOptions } from "./store/redis.js";
export { MemoryStore } from "./store/memory.js";
export * from "./model/errors.js";
export {
  ANY,
  type ExpectedVersion,
  type StreamId,
  streamId,
  deriveEventId,
  formatCursor,
  parseCursor,
  cursorMs,
  CURSOR_ZERO,
  EVENT_ID_NAMESPACE,
} from "./model/ids.js";
export type { Event, Message, ToolCall, ToolResult, Mutation, Fields } from "./model/events.js";
export { EVENT_TYPES } from "./model/events.js";
export type { AppendResult, RecordedEvent, OpenAttempt } from "./model/records.js";
export { eventLine, appendLine } from "./model/records.js";
export { ArtifactRef } from "./model/artifacts.js";
export type { Fence } from "./model/fences.js";
export { DEFAULT_LIMITS, type Limits, prepareAppend, type PreparedAppend } from "./model/batch.js";
export { canonicalBytes, MAX_DEPTH } from "./model/canonical.js";
export {
  Tailer,
  watch,
  contextLine,
  renderContext,
  DEFAULT_TAILER_OPTIONS,
  type ContextOptions,
  type TailerOptions,
  type TailerRunOptions,
  type WatchOptions,
  type Delivery,
  type Handler,
} from "./tailer.js";
export { RedisGroups } from "./store/groups.js";
export type { GroupBackend } from "./store/consumers.js";
export { MemoryGroups } from "./store/memorygroups.js";
export { Recorder, Run, LIFECYCLE, type Recovery, type RecorderOptions, type RunOptions, type CallOptions } from "./recorder.js";
/** @deprecated The recorder's options are `RunOptions` now; the tailer's are `TailerRunOptions`. */
export type { RunOptions as RecorderRunOptions } from "./recorder.js";
export * from "./calls.js";
export { currentCall, NoCurrentCall, calling, type CurrentCall } from "./current.js";
export { idempotencyKey, KEY_PREFIX } from "./model/keys.js";
export { type Durability, parseDurability } from "./model/durability.js";
