package model

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// KeyPrefix starts every idempotency key this version derives.
const KeyPrefix = "lb1-"

const keyDomain = "ledger-bus idempotency key"

// IdempotencyKey is the key of a logical call (spec/ledger-v1.md, 7.1): the same for every
// attempt at one call, whichever process or language makes it, derived from where the call
// stands in the ledger (session, run, the run id's incarnation, step) and never from the
// attempt or the process. It is "lb1-" and the first 32 hex digits of SHA-256 over the domain,
// session, run, step and decimal incarnation joined by U+001F.
func IdempotencyKey(sessionID, runID, stepID string, incarnation int64) string {
	text := strings.Join([]string{keyDomain, sessionID, runID, stepID, strconv.FormatInt(incarnation, 10)}, "\x1f")
	sum := sha256.Sum256([]byte(text))
	return KeyPrefix + hex.EncodeToString(sum[:])[:32]
}
