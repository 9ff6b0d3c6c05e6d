package redisstore

import (
	"fmt"
	"hash/crc32"
)

// Every key of a session carries the hash tag {<session>}, so one Lua call touches one slot and
// the layout runs unchanged on Redis Cluster; the two cross-session indexes are split into
// buckets with hash tags of their own, so that on a cluster they spread over the shards. The
// names are spec/ledger-v1.md section 6's, as the Python package builds them
// (ledger_bus/store/redis/keys.py).

// indexBuckets is how many sorted sets each cross-session index is split into: a session is
// listed in bucket crc32(session id) mod 64 by every store in every language.
const indexBuckets = 64

// key is the key of one of a session's records: "<prefix>:{<session>}:<suffix>", suffix "log",
// "meta", "s:<stream>", "dead:<group>" and so on.
func (s *Store) key(session, suffix string) string {
	return s.prefix + ":{" + session + "}:" + suffix
}

// The KEYS of each script the store runs, in the order ledger_bus/store/lua/protocol.json gives
// them (protocol_test.go holds each builder here to it).

// appendKeys are the KEYS of append.lua for an append to stream, in its order.
func (s *Store) appendKeys(session, stream string) []string {
	return []string{
		s.key(session, "log"),
		s.key(session, "meta"),
		s.key(session, "s:"+stream),
		s.key(session, "idem:"+stream),
		s.key(session, "open"),
		s.key(session, "safe"),
		s.key(session, "tomb"),
	}
}

// artifactKeys are the KEYS append.lua takes after its own for an append whose events keep
// fields as the artifacts shas.
func (s *Store) artifactKeys(session string, shas []string) []string {
	keys := []string{s.key(session, "arts")}
	for _, sha := range shas {
		keys = append(keys, s.artifactKey(session, sha))
	}
	return keys
}

// artifactPutKeys are the KEYS of artifact_put.lua: the upload token names, then the artifact.
func (s *Store) artifactPutKeys(session, sha256, token string) []string {
	return []string{s.artifactKey(session, sha256) + ":" + token, s.artifactKey(session, sha256)}
}

// readStreamKeys are the KEYS of read_stream.lua: the stream's index, then the session log.
func (s *Store) readStreamKeys(session, stream string) []string {
	return []string{s.key(session, "s:"+stream), s.key(session, "log")}
}

// pruneConsumersKeys are the KEYS of prune_consumers.lua: the session log its groups read.
func (s *Store) pruneConsumersKeys(session string) []string {
	return []string{s.key(session, "log")}
}

// leaseKeys are the KEYS of lease.lua for the lease name of session: the lease (its owner,
// with a TTL) and the session's fences (lease name -> the token of its current holding). The
// append script names the same two from its tombstone key's prefix, as it does the bounds.
func (s *Store) leaseKeys(session, name string) []string {
	return []string{s.key(session, "lease:"+name), s.key(session, "fences")}
}

// artifactKey is the key of an artifact of a session, by its sha256.
func (s *Store) artifactKey(session, sha256 string) string {
	return s.key(session, "art:"+sha256)
}

// bucketOf is the bucket of the cross-session indexes a session is listed in.
func bucketOf(session string) int {
	return int(crc32.ChecksumIEEE([]byte(session)) % indexBuckets)
}

// indexKey is one bucket of the sessions index, by last activity.
func (s *Store) indexKey(bucket int) string {
	return fmt.Sprintf("%s:sessions:{%s-%02d}", s.prefix, s.prefix, bucket)
}

// openIndexKey is one bucket of the index of sessions that may have open attempts.
func (s *Store) openIndexKey(bucket int) string {
	return fmt.Sprintf("%s:open-sessions:{%s-%02d}", s.prefix, s.prefix, bucket)
}
