/**
 * The buckets of the cross-session indexes, part of the contract: a session is listed in bucket
 * crc32(session_id) mod 64 by every store in every language.
 */

import { crc32 } from "node:zlib";

export const INDEX_BUCKETS = 64;

export function bucketOf(sessionId: string): number {
  return crc32(Buffer.from(sessionId, "utf8")) % INDEX_BUCKETS;
}
