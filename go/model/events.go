package model

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ledger-bus/ledger-bus/go/internal/pyrepr"
)

// The four event types of the vocabulary (spec/ledger-v1.md section 2).
const (
	TypeMessage    = "message"
	TypeToolCall   = "tool_call"
	TypeToolResult = "tool_result"
	TypeMutation   = "mutation"
)

// eventTypes is the vocabulary, in the order error messages list it.
var eventTypes = []string{TypeMessage, TypeToolCall, TypeToolResult, TypeMutation}

// reservedFields are the names the ledger sets on every recorded event: a mutation's own
// fields may not take them.
var reservedFields = []string{"cursor", "recorded_at", "session", "stream", "version"}

// Message is an event saying an agent said body.
func Message(agent, body string) Event {
	return Event{"type": TypeMessage, "agent": agent, "body": body}
}

// ToolCall is an event requesting a call of tool with args, attempt attemptID; it is
// committed before the call runs. Nil or empty args are left out (they are the default).
func ToolCall(agent, tool, attemptID string, args map[string]any) Event {
	e := Event{"type": TypeToolCall, "agent": agent, "tool": tool, "attempt_id": attemptID}
	if len(args) > 0 {
		e["args"] = args
	}
	return e
}

// ToolResult is the terminal event of the call attemptID of tool: status "ok" or "error",
// and what it gave, any JSON value. A nil result is left out (it is the default).
func ToolResult(agent, tool, attemptID, status string, result any) Event {
	e := Event{"type": TypeToolResult, "agent": agent, "tool": tool, "attempt_id": attemptID,
		"status": status}
	if result != nil {
		e["result"] = result
	}
	return e
}

// Mutation is an event saying session state changed: kind names how, fields carry what. Its
// type, agent and kind are set over any of the same names in fields; fields is not kept.
func Mutation(agent, kind string, fields map[string]any) Event {
	e := make(Event, len(fields)+3)
	for name, value := range fields {
		e[name] = value
	}
	e["type"], e["agent"], e["kind"] = TypeMutation, agent, kind
	return e
}

// check is one field's rule: its fault as pydantic words it in the Python package, or "".
type check func(value any) string

type fieldSpec struct {
	name     string
	check    check
	required bool
}

// stringOf is a value of any string kind as a string; a json.Number is a number.
func stringOf(value any) (string, bool) {
	switch v := value.(type) {
	case string:
		return v, true
	case nil, json.Number:
		return "", false
	}
	rv := reflect.ValueOf(value)
	if rv.Kind() == reflect.String {
		return rv.String(), true
	}
	return "", false
}

func checkString(value any) string {
	if _, ok := stringOf(value); !ok {
		return "Input should be a valid string"
	}
	return ""
}

func checkNonEmpty(value any) string {
	s, ok := stringOf(value)
	switch {
	case !ok:
		return "Input should be a valid string"
	case s == "":
		return "String should have at least 1 character"
	}
	return ""
}

// checkIdent is the rule of ids, agents and tool names: non-empty strings with no control
// characters (C0, DEL, C1), so that they print on one line and the stores can join them with
// a control character in their attempt bookkeeping.
func checkIdent(value any) string {
	if fault := checkNonEmpty(value); fault != "" {
		return fault
	}
	s, _ := stringOf(value)
	if !identText(s) {
		return "must not contain control characters"
	}
	return ""
}

func identText(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r <= 0x1f || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

func checkOptionalIdent(value any) string {
	if value == nil {
		return ""
	}
	return checkIdent(value)
}

func checkObject(value any) string {
	if !isObject(value) {
		return "Input should be a valid dictionary"
	}
	return ""
}

func checkOptionalObject(value any) string {
	if value == nil {
		return ""
	}
	return checkObject(value)
}

func checkStatus(value any) string {
	if s, ok := stringOf(value); !ok || (s != "ok" && s != "error") {
		return "Input should be 'ok' or 'error'"
	}
	return ""
}

func checkAnything(any) string { return "" }

// isObject reports whether value is a map with string keys.
func isObject(value any) bool {
	switch value.(type) {
	case map[string]any, Event:
		return true
	case nil:
		return false
	}
	rv := reflect.ValueOf(value)
	return rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String
}

// listOf is the items of a slice or array (but not of []byte), or false.
func listOf(value any) ([]any, bool) {
	switch v := value.(type) {
	case []any:
		return v, true
	case []string:
		out := make([]any, len(v))
		for i, s := range v {
			out[i] = s
		}
		return out, true
	case nil:
		return nil, false
	}
	rv := reflect.ValueOf(value)
	if (rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array) ||
		rv.Type().Elem().Kind() == reflect.Uint8 {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

// The common fields, in the order the Python package's models declare them: of several
// faults, the first in this order is the one named.
var commonFields = []fieldSpec{
	{"agent", checkIdent, true},
	{"event_id", checkOptionalIdent, false},
	{"run_id", checkOptionalIdent, false},
	{"step_id", checkOptionalIdent, false},
	{"attempt_id", checkOptionalIdent, false},
	{"parents", checkAnything, false}, // a list of idents: checked by item, in checkParents
}

func schema(own ...fieldSpec) []fieldSpec {
	out := slices.Clone(commonFields)
	for _, spec := range own {
		// A field a type redefines keeps its place among the common ones.
		if at := slices.IndexFunc(out, func(f fieldSpec) bool { return f.name == spec.name }); at >= 0 {
			out[at] = spec
		} else {
			out = append(out, spec)
		}
	}
	return out
}

var schemas = map[string][]fieldSpec{
	TypeMessage: schema(fieldSpec{"body", checkString, true}),
	TypeToolCall: schema(
		fieldSpec{"tool", checkIdent, true},
		fieldSpec{"args", checkObject, false},
		fieldSpec{"attempt_id", checkIdent, true},
		fieldSpec{"idempotency_key", checkOptionalIdent, false},
	),
	TypeToolResult: schema(
		fieldSpec{"tool", checkIdent, true},
		fieldSpec{"attempt_id", checkIdent, true},
		fieldSpec{"status", checkStatus, true},
		fieldSpec{"result", checkAnything, false},
		fieldSpec{"settled_by", checkOptionalObject, false},
	),
	TypeMutation: schema(fieldSpec{"kind", checkNonEmpty, true}),
}

// isDefault reports whether a field of an event of type kind holds its default value, which
// leaves it out of the event's normal form (spec/ledger-v1.md section 2.2): event_id, run_id,
// step_id and attempt_id null and parents empty on every type, args empty and idempotency_key
// null on a tool_call, result and settled_by null on a tool_result. A mutation's own fields are its data, kept whatever they hold.
// value is already a plain JSON value (jsonValue's).
func isDefault(kind, name string, value any) bool {
	switch name {
	case "event_id", "run_id", "step_id", "attempt_id":
		return value == nil
	case "parents":
		list, ok := value.([]any)
		return ok && len(list) == 0
	case "args":
		object, ok := value.(map[string]any)
		return kind == TypeToolCall && ok && len(object) == 0
	case "idempotency_key":
		return kind == TypeToolCall && value == nil
	case "result", "settled_by":
		return kind == TypeToolResult && value == nil
	}
	return false
}

// pyRepr is a value as the Python package's messages quote it.
func pyRepr(value any) string {
	switch v := value.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	}
	if s, ok := stringOf(value); ok {
		return quoted(s, 80)
	}
	return pyrepr.Repr(value)
}

// givenFields returns the event's normal form: its fields as plain JSON values, those given
// with their default value left out, once checked against the vocabulary and found to be JSON
// the ledger carries exactly. The fault is an *InvalidEventError naming index and the field.
func givenFields(raw Event, index int) (Event, error) {
	kind, _ := stringOf(raw["type"])
	specs, known := schemas[kind]
	if !known {
		return nil, &InvalidEventError{
			Reason: fmt.Sprintf("unknown event type %s; the vocabulary is %s",
				pyRepr(raw["type"]), strings.Join(eventTypes, ", ")),
			Index: index, Field: "type",
		}
	}
	invalid := func(field, reason string) error {
		return &InvalidEventError{Reason: reason, Index: index, Field: field}
	}
	if kind == TypeMutation {
		for _, name := range reservedFields {
			if _, ok := raw[name]; ok {
				return nil, invalid(name, "set by the ledger itself; a mutation may not carry it")
			}
		}
	}
	for _, spec := range specs {
		value, ok := raw[spec.name]
		if !ok {
			if spec.required {
				return nil, invalid(spec.name, "required field is missing")
			}
			continue
		}
		if reason := spec.check(value); reason != "" {
			return nil, invalid(spec.name, reason)
		}
		if spec.name == "parents" {
			if err := checkParents(value, index); err != nil {
				return nil, err
			}
		}
	}
	if kind != TypeMutation {
		if name, found := unknownField(raw, specs); found {
			return nil, invalid(name, kind+" events have no such field")
		}
	}
	fields := make(Event, len(raw))
	var first firstFault
	for name, value := range raw {
		if name == "type" {
			fields[name] = kind // a named string type becomes a plain string
			continue
		}
		// The event object is level 1, its fields' values level 2.
		plain, f := member(name, value, 1)
		if f != nil {
			first.keep(name, f)
		} else if !isDefault(kind, name, plain) {
			fields[name] = plain
		}
	}
	if f := first.fault; f != nil {
		return nil, invalid(f.where(), f.reason)
	}
	return fields, nil
}

// unknownField is the first name in key order that is neither "type" nor a field of specs.
func unknownField(raw Event, specs []fieldSpec) (string, bool) {
	first, found := "", false
	for name := range raw {
		if name == "type" || (found && name >= first) {
			continue
		}
		if !slices.ContainsFunc(specs, func(f fieldSpec) bool { return f.name == name }) {
			first, found = name, true
		}
	}
	return first, found
}

func checkParents(value any, index int) error {
	items, ok := listOf(value)
	if !ok {
		return &InvalidEventError{Reason: "Input should be a valid list", Index: index, Field: "parents"}
	}
	for at, item := range items {
		if reason := checkIdent(item); reason != "" {
			return &InvalidEventError{Reason: reason, Index: index, Field: "parents." + strconv.Itoa(at)}
		}
	}
	return nil
}
