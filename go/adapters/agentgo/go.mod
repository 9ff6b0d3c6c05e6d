module github.com/ledger-bus/ledger-bus/go/adapters/agentgo

go 1.26.0

require (
	github.com/compforge/agentgo v0.0.2-0.20260826112438-691b2c90c5bb
	github.com/ledger-bus/ledger-bus/go v0.1.0
)

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
