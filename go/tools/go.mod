// The Go SDK's development tools, pinned apart from the SDK so that its users never fetch them,
// and outside go/go.work so that the workspace's build list never meets theirs (GOWORK=off here):
// staticcheck, which `make lint` builds from here and runs in each module of the workspace, and
// modproxy, which writes modules into a module proxy's layout (go run ./modproxy -h).
module github.com/ledger-bus/ledger-bus/go/tools

go 1.26

tool honnef.co/go/tools/cmd/staticcheck

require golang.org/x/mod v0.31.0

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/sync v0.19.0 // indirect
	golang.org/x/tools v0.40.1-0.20260108161641-ca281cf95054 // indirect
	honnef.co/go/tools v0.7.0 // indirect
)
