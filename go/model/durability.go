package model

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultDurabilityTimeout is how long an append waits for its durability by default.
const DefaultDurabilityTimeout = time.Second

// Durability is what an append waits for before it is acknowledged, as the Python package's
// ledger_bus/model/durability.py has it: nothing beyond the primary's memory (Local), Replicas
// replicas' acknowledgement (WAIT), the primary's AOF fsynced (WAITAOF), or both; Timeout is
// how long it waits before the append is reported written but not confirmed
// (ErrDurabilityNotConfirmed).
type Durability struct {
	Replicas int
	AOF      bool
	Timeout  time.Duration
}

// Local is the durability that waits for nothing (a function, so that no caller can change it
// for the whole process).
func Local() Durability { return Durability{Timeout: DefaultDurabilityTimeout} }

var durabilityLevel = regexp.MustCompile(`^(local|aof|replicas:([1-9][0-9]?)|aof\+replicas:([1-9][0-9]?))$`)

// ParseDurability parses "local", "replicas:N", "aof" or "aof+replicas:N" (N from 1 to 99),
// surrounding whitespace ignored; an InvalidInput error for anything else or a timeout below a
// millisecond.
func ParseDurability(text string, timeout time.Duration) (Durability, error) {
	text = strings.TrimSpace(text)
	match := durabilityLevel.FindStringSubmatch(text)
	if match == nil {
		return Durability{}, Errorf(ErrInvalidInput,
			"durability must be local, replicas:N, aof or aof+replicas:N; got %s", quoted(text, 80))
	}
	if timeout < time.Millisecond {
		return Durability{}, Errorf(ErrInvalidInput,
			"durability timeout must be at least a millisecond: %s", timeout)
	}
	replicas := match[2] + match[3]
	n := 0
	if replicas != "" {
		n, _ = strconv.Atoi(replicas)
	}
	return Durability{Replicas: n, AOF: strings.HasPrefix(text, "aof"), Timeout: timeout}, nil
}

// String is the level's name as ParseDurability takes it: "local", "replicas:2", "aof",
// "aof+replicas:1".
func (d Durability) String() string {
	switch {
	case d.AOF && d.Replicas > 0:
		return "aof+replicas:" + strconv.Itoa(d.Replicas)
	case d.AOF:
		return "aof"
	case d.Replicas > 0:
		return "replicas:" + strconv.Itoa(d.Replicas)
	}
	return "local"
}

// Local reports whether the level waits for nothing beyond the primary's memory.
func (d Durability) Local() bool { return d.Replicas <= 0 && !d.AOF }
