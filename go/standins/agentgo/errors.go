package agentgo

import (
	"errors"
	"fmt"
)

// The errors of the agent's lifecycle.
var (
	ErrMaxTurns        = errors.New("max turns reached")
	ErrNoModel         = errors.New("no model configured")
	ErrNoMessages      = errors.New("cannot continue: no messages in context")
	ErrAlreadyRunning  = errors.New("agent is already running")
	ErrBadContinuation = errors.New("cannot continue from this message role without queued messages")
	ErrRunsHeld        = errors.New("agent runs are held")
)

// MaxTurnsError carries the turn limit; errors.Is matches ErrMaxTurns.
type MaxTurnsError struct {
	Limit int
}

func (e *MaxTurnsError) Error() string        { return fmt.Sprintf("max turns (%d) reached", e.Limit) }
func (e *MaxTurnsError) Is(target error) bool { return target == ErrMaxTurns }
