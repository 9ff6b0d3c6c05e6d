package drill

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Fencing is one fencing drill: Rounds rounds, each on a fresh run. In each, Zombie starts the
// run with a short lease and writes once, is stopped for Pause (past its lease), and is
// continued with its next write already queued; with Takeover, Heir has taken the run over
// (resumed it, its run.resumed written) meanwhile, else Heir resumes it afterwards. Heir then
// writes and ends the run.
type Fencing struct {
	Zombie, Heir *Process
	Rounds       int
	Takeover     bool
	Pause        time.Duration
	// Writes are the kinds of the zombie's queued write ("message", "tool"), a round each in
	// turn.
	Writes []string
	// Record describes each event of a run's streams as the ledger holds them, a line each
	// carrying the text the event was written with (a message's body, a call's arguments), its
	// kind for a mutation.
	Record func(t testing.TB, run string) []string
}

// Result is what a drill measured.
type Result struct {
	Rounds int
	// Refused counts the zombie's writes refused as a lost lease, Fenced those of them the
	// store refused by the write's fence (the others the process knew lost before it wrote:
	// its renewal, continued first, found the lease gone).
	Refused, Fenced int
	// Landed counts the rounds in which something of the zombie's write is in the ledger.
	Landed int
	// Other are the other answers the zombie's write got.
	Other []string
}

func (r Result) String() string {
	return fmt.Sprintf("%d rounds: the zombie's write refused as a lost lease %d times (by the store's fence %d, "+
		"known lost by the process %d), landed %d times, answered otherwise %d times %q",
		r.Rounds, r.Refused, r.Fenced, r.Refused-r.Fenced, r.Landed, len(r.Other), r.Other)
}

// Run runs the drill, failing the test at each round whose zombie wrote anything, or whose
// heir could not write on.
func Run(t *testing.T, d Fencing) Result {
	t.Helper()
	var result Result
	for n := range d.Rounds {
		d.round(t, n, &result)
	}
	return result
}

func (d Fencing) round(t *testing.T, n int, result *Result) {
	t.Helper()
	run := fmt.Sprintf("r%d", n)
	text := func(who string) string { return fmt.Sprintf("%s-%d", who, n) }
	// Given a run held by the zombie, one write made
	d.Zombie.Ask(Request{Op: "start", Run: run})
	d.Zombie.Ask(Request{Op: "write", Run: run, Kind: "message", Text: text("before")})
	// When it is stopped past its lease (and the heir takes the run over meanwhile)
	d.Zombie.Stop()
	time.Sleep(d.Pause)
	if d.Takeover {
		d.Heir.Ask(Request{Op: "start", Run: run, Resume: true})
	}
	// and continued with its next write already queued
	kind := d.Writes[n%len(d.Writes)]
	d.Zombie.Queue(Request{Op: "write", Run: run, Kind: kind, Text: text("zombie")})
	d.Zombie.Cont()
	answer := d.Zombie.Answer()

	// Then that write is refused as a lost lease, and nothing of it is in the ledger
	result.Rounds++
	switch {
	case answer.LeaseLost:
		result.Refused++
		if answer.Fenced {
			result.Fenced++
		}
	case answer.OK:
		result.Other = append(result.Other, "accepted")
		t.Errorf("round %d: the zombie's %s was accepted", n, kind)
	default:
		result.Other = append(result.Other, answer.Error)
		t.Errorf("round %d: the zombie's %s was refused, but not as a lost lease: %s: %s", n, kind, answer.Error, answer.Message)
	}
	if answer.Ran {
		t.Errorf("round %d: the zombie's tool ran", n)
	}
	if found := having(d.Record(t, run), text("zombie")); len(found) > 0 {
		result.Landed++
		t.Errorf("round %d: the zombie's %s is in the ledger: %q", n, kind, found)
	}
	// (Its end writes nothing either: it lost the run.)
	d.Zombie.Queue(Request{Op: "end", Run: run})
	if end := d.Zombie.Answer(); !end.OK && !end.LeaseLost {
		t.Errorf("round %d: the zombie's end: %s: %s", n, end.Error, end.Message)
	}

	// And the run's holder writes on
	if !d.Takeover {
		d.Heir.Ask(Request{Op: "start", Run: run, Resume: true})
	}
	d.Heir.Ask(Request{Op: "write", Run: run, Kind: "message", Text: text("heir")})
	d.Heir.Ask(Request{Op: "end", Run: run})
	record := d.Record(t, run)
	if len(having(record, text("before"))) == 0 || len(having(record, text("heir"))) == 0 ||
		len(having(record, text("zombie"))) > 0 || len(having(record, "run.finished")) != 1 {
		t.Errorf("round %d: the run's record:\n%s", n, strings.Join(record, "\n"))
	}
}

// having is the lines of a record that carry text.
func having(record []string, text string) []string {
	return slices.DeleteFunc(slices.Clone(record), func(line string) bool {
		return !strings.Contains(line, text)
	})
}
