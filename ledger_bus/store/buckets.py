"""The buckets of the cross-session indexes: part of the contract, not of one backend.

Sessions are listed by last activity and by open attempts in INDEX_BUCKETS buckets, a session in
bucket crc32(session_id) mod INDEX_BUCKETS, so that several reconcilers can share the buckets
between them and, on a Redis Cluster, the indexes spread over the shards instead of making one
hot key. Every store lists a session in the same bucket.
"""

from __future__ import annotations

import zlib
from typing import Final

INDEX_BUCKETS: Final = 64


def bucket_of(session_id: str) -> int:
    """Which of the INDEX_BUCKETS buckets a session is listed in."""
    return zlib.crc32(session_id.encode()) % INDEX_BUCKETS
