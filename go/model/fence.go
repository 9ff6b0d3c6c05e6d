package model

import "strconv"

// Fence is a lease as its holder holds it: the lease's name (within the session of the stream
// appended to), the owner holding it, and the token that holding drew (store.Attempts.Lease
// returns it). An append made under it (store.WithFence) is refused with a *LeaseLostError,
// atomically and writing nothing, once that holding is over: the lease expired, or another
// owner took it and drew a newer token. Each new holding of a lease draws a greater token than
// any before it, so a process stopped past its lease (a GC pause, SIGSTOP, a VM migrated) and
// woken with a write already on its way cannot land it after another process took over.
type Fence struct {
	Lease string
	Owner string
	Token int64
}

// Check returns an error of kind ErrInvalidInput unless f is a fence a store can check: a lease
// name and an owner that are names (as session ids are: no whitespace, control characters or
// braces, so that neither can spoil the script's argument), and a token of 1 or more.
func (f Fence) Check() error {
	if err := CheckName(f.Lease, "lease name"); err != nil {
		return err
	}
	// The owner is any token the holder chose (a uuid, a host and pid); the lease names it whole.
	if err := CheckName(f.Owner, "lease owner"); err != nil {
		return err
	}
	if f.Token < 1 {
		return Errorf(ErrInvalidInput, "a fence's token is an int >= 1, got %d", f.Token)
	}
	return nil
}

// LuaArg is the fence as the append script takes it (its ARGV[9]): "<lease>␟<owner>␟<token>",
// ␟ being U+001F, which Check keeps out of both names.
func (f Fence) LuaArg() string {
	return f.Lease + noteSep + f.Owner + noteSep + strconv.FormatInt(f.Token, 10)
}

// LeaseLostError is an append made under a fence whose holding is over: the lease expired, or
// another holding took it. Nothing was written, and its writer may write nothing more under
// that holding: a process that finds its lease lost stops, and whoever holds the lease now
// (Token) goes on. It is of kind ErrLeaseLost, an ErrRefused.
type LeaseLostError struct {
	// Fence is the holding the append named.
	Fence Fence
	// Token is the lease's current token: greater than Fence.Token when another holding took
	// the lease, the same (or 0, none drawn) when it expired with nobody holding it since.
	Token int64
}

func (e *LeaseLostError) Error() string {
	now := "it expired"
	if e.Token > e.Fence.Token {
		now = "another holding took it (token " + strconv.FormatInt(e.Token, 10) + ")"
	}
	return "lease " + e.Fence.Lease + ": the holding of " + e.Fence.Owner + " (token " +
		strconv.FormatInt(e.Fence.Token, 10) + ") is over, " + now + "; nothing written"
}

func (e *LeaseLostError) Is(target error) bool { return is(ErrLeaseLost, target) }
