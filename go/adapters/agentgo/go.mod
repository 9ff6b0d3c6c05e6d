module github.com/ledger-bus/ledger-bus/go/adapters/agentgo

go 1.26.0

require github.com/ledger-bus/ledger-bus/go v0.0.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gowebpki/jcs v1.0.2 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// The adapter is released with the SDK it is written against, from the same commit.
replace github.com/ledger-bus/ledger-bus/go => ../..
