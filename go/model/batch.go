package model

import (
	"cmp"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Limits bound what one append may carry, as spec/ledger-v1.md section 2.1 sets them. A field
// left zero takes its default (DefaultLimits), each on its own, as Python's Limits does; the
// byte limits count the events' canonical JSON outside their artifacts.
type Limits struct {
	// MaxEventBytes is the most one event may hold.
	MaxEventBytes int
	// MaxEventsPerAppend is how many events one append may carry: one append is one Lua call,
	// and a Lua call blocks the whole server while it runs.
	MaxEventsPerAppend int
	// MaxAppendBytes is the most one append may hold, all its events together.
	MaxAppendBytes int
	// ArtifactThreshold is the canonical size above which an event keeps its largest fields
	// apart as artifacts; negative: never.
	ArtifactThreshold int
	// MaxArtifactBytes is the most one artifact may hold.
	MaxArtifactBytes int
}

// DefaultLimits are the limits every implementation has unless told otherwise: events of
// 1 MiB, appends of 1000 events and 8 MiB, artifacts above 64 KiB, of 64 MiB at most.
func DefaultLimits() Limits {
	return Limits{
		MaxEventBytes:      1024 * 1024,
		MaxEventsPerAppend: 1000,
		MaxAppendBytes:     8 * 1024 * 1024,
		ArtifactThreshold:  DefaultArtifactThreshold,
		MaxArtifactBytes:   DefaultMaxArtifactBytes,
	}
}

// WithDefaults is l with each field left zero set to its default.
func (l Limits) WithDefaults() Limits {
	defaults := DefaultLimits()
	for _, f := range []struct{ field, fallback *int }{
		{&l.MaxEventBytes, &defaults.MaxEventBytes},
		{&l.MaxEventsPerAppend, &defaults.MaxEventsPerAppend},
		{&l.MaxAppendBytes, &defaults.MaxAppendBytes},
		{&l.ArtifactThreshold, &defaults.ArtifactThreshold},
		{&l.MaxArtifactBytes, &defaults.MaxArtifactBytes},
	} {
		if *f.field == 0 {
			*f.field = *f.fallback
		}
	}
	return l
}

// PreparedAppend is one append's events checked, canonicalised, digested and encoded: what any
// store writes.
type PreparedAppend struct {
	// Digest is the lowercase hex sha256 of the append's canonical content (spec section 2.2),
	// the events as given: what a retry is recognised by.
	Digest string
	// Fields are the events as recorded: their normal form, as plain JSON values (int64 for
	// every integer, float64, string, bool, nil, []any, map[string]any), event_id filled in.
	Fields []Event
	// Payloads are the msgpack of each event's fields, an ArtifactRef in place of each field
	// kept apart.
	Payloads [][]byte
	// Notes are each event's note for the open-attempts bookkeeping ("" for none); see
	// LuaNotes.
	Notes []string
	// Artifacts are the fields kept apart, each artifact once, in the order the events first
	// reference them; Uses says how many fields of the append each stands for.
	Artifacts []Artifact
	Uses      []ArtifactUse
}

// OpensAttempts reports whether some event of the append opens an attempt.
func (p PreparedAppend) OpensAttempts() bool {
	return slices.ContainsFunc(p.Notes, OpensAttempt)
}

// PrepareAppend checks and encodes the events of one append to stream under appendID, or
// returns an *InvalidEventError naming the first fault: the first event at fault (in order,
// each checked against the vocabulary, then as JSON, then for size) and the field. The digest
// covers the events as the caller gave them; the ids the ledger generates for events without
// one are filled in afterwards. The events are not changed. stream and appendID are used as
// given, to derive event ids: the caller checks them first (NewStreamID, CheckAppendID).
func PrepareAppend(stream StreamID, appendID string, events []Event, limits Limits) (PreparedAppend, error) {
	limits = limits.WithDefaults()
	if len(events) == 0 {
		return PreparedAppend{}, &InvalidEventError{Reason: "an append needs at least one event", Index: -1}
	}
	if len(events) > limits.MaxEventsPerAppend {
		return PreparedAppend{}, &InvalidEventError{
			Reason: fmt.Sprintf("%d events in one append; the limit is %d",
				len(events), limits.MaxEventsPerAppend),
			Index: -1,
		}
	}
	all := make([]Event, len(events))
	moved := make([][]keptApart, len(events))
	writer := getWriter()
	defer putWriter(writer)
	digest := newArrayDigest()
	total := 0
	for index, raw := range events {
		fields, err := givenFields(raw, index)
		if err != nil {
			return PreparedAppend{}, err
		}
		part, err := writer.canonical(map[string]any(fields))
		if err != nil {
			return PreparedAppend{}, &InvalidEventError{Reason: err.Error(), Index: index}
		}
		digest.add(part)
		size := len(part)
		if limits.ArtifactThreshold > 0 && size > limits.ArtifactThreshold {
			if moved[index], size, err = moveOut(index, fields, size, limits); err != nil {
				return PreparedAppend{}, err
			}
		}
		if size > limits.MaxEventBytes {
			kept := ""
			if len(moved[index]) > 0 {
				kept = " outside its artifacts"
			}
			return PreparedAppend{}, &InvalidEventError{
				Reason: fmt.Sprintf("%d bytes of canonical JSON%s; the limit is %d",
					size, kept, limits.MaxEventBytes),
				Index: index,
			}
		}
		total += size
		if total > limits.MaxAppendBytes {
			return PreparedAppend{}, &InvalidEventError{
				Reason: fmt.Sprintf("the append exceeds %d bytes in all", limits.MaxAppendBytes),
				Index:  -1,
			}
		}
		all[index] = fields
	}
	prepared := PreparedAppend{
		Digest: digest.hex(),
		Fields: all,
		Notes:  make([]string, len(all)),
	}
	derive := newIDDeriver(stream, appendID)
	// The payloads are about the size of the canonical bytes, and an event id more each.
	packed := newPacker(total+64*len(all), &writer.members)
	seen := map[string]int{} // sha256 -> its place in Uses
	for index, fields := range all {
		if _, ok := fields["event_id"]; !ok {
			fields["event_id"] = derive(index)
		}
		prepared.Notes[index] = noteOf(fields)
		payload := fields
		if out := moved[index]; len(out) > 0 {
			payload = make(Event, len(fields))
			for name, value := range fields {
				payload[name] = value
			}
			for _, kept := range out {
				artifact := kept.artifact
				payload[kept.name] = artifact.Ref()
				at, ok := seen[artifact.SHA256]
				if !ok {
					at = len(prepared.Uses)
					seen[artifact.SHA256] = at
					prepared.Artifacts = append(prepared.Artifacts, artifact)
					prepared.Uses = append(prepared.Uses, ArtifactUse{SHA256: artifact.SHA256})
				}
				prepared.Uses[at].Count++
			}
		}
		if err := packed.add(payload); err != nil {
			return PreparedAppend{}, &InvalidEventError{Reason: err.Error(), Index: index}
		}
	}
	prepared.Payloads = packed.payloads()
	settled(prepared.Notes)
	return prepared, nil
}

// keptApart is a field of an event moved out to an artifact.
type keptApart struct {
	name     string
	artifact Artifact
}

// moveOut returns the artifacts of an event's largest fields, largest first, taken until the event is below
// the threshold, and the event's canonical size (about) once they are out: the Python
// package's rule, so that an event appended from any language keeps the same fields apart.
func moveOut(index int, fields Event, size int, limits Limits) ([]keptApart, int, error) {
	type sized struct {
		size      int
		name      string
		canonical []byte
	}
	var candidates []sized
	for _, name := range movable(fields) {
		value := fields[name]
		var canonical []byte
		var length int
		if s, ok := value.(string); ok {
			// A string's artifact is its UTF-8 text, about its canonical size: not
			// canonicalised.
			length = len(s) + 2
		} else {
			var err error
			if canonical, err = canonicalPlain(value); err != nil {
				return nil, 0, &InvalidEventError{Reason: err.Error(), Index: index, Field: name}
			}
			length = len(canonical)
		}
		// The name counts in characters, as Python's len() counts it.
		candidates = append(candidates, sized{length + utf8.RuneCountInString(name), name, canonical})
	}
	slices.SortStableFunc(candidates, func(a, b sized) int { return cmp.Compare(b.size, a.size) })
	var out []keptApart
	for _, c := range candidates {
		if size <= limits.ArtifactThreshold || c.size <= refBytes {
			break
		}
		artifact := artifactOf(fields[c.name], c.canonical)
		if len(artifact.Data) > limits.MaxArtifactBytes {
			return nil, 0, &InvalidEventError{
				Reason: fmt.Sprintf("%d bytes; the limit of an artifact is %d",
					len(artifact.Data), limits.MaxArtifactBytes),
				Index: index, Field: c.name,
			}
		}
		out = append(out, keptApart{c.name, artifact})
		size -= c.size - refBytes
	}
	return out, size, nil
}
