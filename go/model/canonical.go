package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// MaxSafeInteger is the largest integer JSON carries exactly (2^53-1): every implementation
// refuses integers beyond +-MaxSafeInteger rather than round them.
const MaxSafeInteger = 1<<53 - 1

// MaxDepth is how deeply objects and arrays may nest in an event, the event object itself
// being level 1 (spec/ledger-v1.md section 2.1).
const MaxDepth = 128

// jsonFault is a value JSON cannot carry exactly; path says where, innermost step first
// (".key", "[3]").
type jsonFault struct {
	reason string
	path   []string
}

// where is the fault's place as InvalidEventError names fields: "args.nested.deep[1]",
// shortened in the middle when it is very deep, as the Python package shortens it.
func (f *jsonFault) where() string {
	steps := slices.Clone(f.path)
	slices.Reverse(steps)
	if len(steps) > 12 {
		short := append([]string{}, steps[:6]...)
		short = append(short, fmt.Sprintf("...(%d more)...", len(steps)-8))
		steps = append(short, steps[len(steps)-2:]...)
	}
	return strings.TrimLeft(strings.Join(steps, ""), ".")
}

func (f *jsonFault) at(step string) *jsonFault {
	f.path = append(f.path, step)
	return f
}

func fault(format string, args ...any) *jsonFault {
	return &jsonFault{reason: fmt.Sprintf(format, args...)}
}

// jsonValue returns v, standing at nesting level depth, as the plain JSON value the ledger
// keeps: nil, bool, string, int64 (within +-MaxSafeInteger), float64 (finite), []any or
// map[string]any, throughout. It takes every Go type that is plainly a JSON value: the
// integer and float kinds, json.Number (an integer literal becomes an int64, any other a
// float64, as Python's json module reads them), json.RawMessage, slices and arrays of JSON
// values and maps with string keys, named types of these kinds included. A nil slice or map
// is an empty array or object, as Go treats them everywhere but in encoding/json. Anything
// else (a struct, a pointer, a channel, []byte) is a fault, as are non-finite floats, integers
// JSON cannot carry exactly, strings that are not valid UTF-8 and nesting deeper than
// MaxDepth.
func jsonValue(v any, depth int) (any, *jsonFault) {
	// The common types first, without reflection.
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if !utf8.ValidString(x) {
			return nil, fault("string is not valid UTF-8")
		}
		return x, nil
	case bool:
		return x, nil
	case int64:
		return safeInt(x)
	case int:
		return safeInt(int64(x))
	case float64:
		return finite(x)
	case map[string]any:
		return jsonObject(x, depth)
	case Event:
		return jsonObject(x, depth)
	case []any:
		return jsonArray(len(x), func(i int) any { return x[i] }, depth)
	case []string:
		return jsonArray(len(x), func(i int) any { return x[i] }, depth)
	case []map[string]any:
		return jsonArray(len(x), func(i int) any { return x[i] }, depth)
	case json.Number:
		return jsonNumber(string(x))
	case json.RawMessage:
		return jsonRaw(x, depth)
	case ArtifactRef, *ArtifactRef:
		return nil, fault("an ArtifactRef is not a JSON value; give the value itself")
	}
	return jsonReflect(reflect.ValueOf(v), depth)
}

// jsonReflect is jsonValue for the types it does not name: named types and other slices and
// maps, by their kind.
func jsonReflect(rv reflect.Value, depth int) (any, *jsonFault) {
	switch rv.Kind() {
	case reflect.String:
		return jsonValue(rv.String(), depth)
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return safeInt(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n := rv.Uint()
		if n > MaxSafeInteger {
			return nil, fault("integer outside +-(2**53-1), which JSON cannot carry exactly")
		}
		return int64(n), nil
	case reflect.Float32, reflect.Float64:
		return finite(rv.Float())
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			// encoding/json would write base64, which no other implementation reads back.
			return nil, fault("%s is not a JSON value; give a string", rv.Type())
		}
		return jsonArray(rv.Len(), func(i int) any { return rv.Index(i).Interface() }, depth)
	case reflect.Map:
		return jsonMap(rv, depth)
	}
	return nil, fault("%s is not a JSON value", rv.Type())
}

func safeInt(n int64) (any, *jsonFault) {
	if n < -MaxSafeInteger || n > MaxSafeInteger {
		return nil, fault("integer outside +-(2**53-1), which JSON cannot carry exactly")
	}
	return n, nil
}

func finite(f float64) (any, *jsonFault) {
	switch {
	case math.IsNaN(f):
		return nil, fault("nan is not a JSON number")
	case math.IsInf(f, 1):
		return nil, fault("inf is not a JSON number")
	case math.IsInf(f, -1):
		return nil, fault("-inf is not a JSON number")
	}
	return f, nil
}

// jsonNumber reads a JSON number as Python's json module does: an integer literal as an
// integer, anything else as a float.
func jsonNumber(text string) (any, *jsonFault) {
	if !strings.ContainsAny(text, ".eE") {
		n, err := strconv.ParseInt(text, 10, 64)
		if err == nil {
			return safeInt(n)
		}
		if digits(strings.TrimPrefix(text, "-"), len(text)) {
			return nil, fault("integer outside +-(2**53-1), which JSON cannot carry exactly")
		}
		return nil, fault("%s is not a JSON number", quoted(text, 40))
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return nil, fault("%s is not a JSON number (out of range)", quoted(text, 40))
		}
		return nil, fault("%s is not a JSON number", quoted(text, 40))
	}
	return finite(f)
}

func jsonRaw(raw json.RawMessage, depth int) (any, *jsonFault) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fault("json.RawMessage is not JSON: %v", err)
	}
	if dec.More() {
		return nil, fault("json.RawMessage holds more than one JSON value")
	}
	return jsonValue(v, depth)
}

func jsonArray(n int, item func(int) any, depth int) (any, *jsonFault) {
	if depth > MaxDepth {
		return nil, fault("nested more than %d levels deep", MaxDepth)
	}
	out := make([]any, n)
	for i := range n {
		v, f := jsonValue(item(i), depth+1)
		if f != nil {
			return nil, f.at("[" + strconv.Itoa(i) + "]")
		}
		out[i] = v
	}
	return out, nil
}

func jsonObject(m map[string]any, depth int) (any, *jsonFault) {
	if depth > MaxDepth {
		return nil, fault("nested more than %d levels deep", MaxDepth)
	}
	out := make(map[string]any, len(m))
	// In key order, so that of several faults the same one is named every time.
	for _, key := range sortedKeys(m) {
		if !utf8.ValidString(key) {
			return nil, fault("object key %s is not valid UTF-8", strconv.Quote(key))
		}
		v, f := jsonValue(m[key], depth+1)
		if f != nil {
			return nil, f.at("." + key)
		}
		out[key] = v
	}
	return out, nil
}

func jsonMap(rv reflect.Value, depth int) (any, *jsonFault) {
	if rv.Type().Key().Kind() != reflect.String {
		if rv.Len() == 0 {
			return nil, fault("%s is not a JSON value: object keys are strings", rv.Type())
		}
		key := rv.MapKeys()[0]
		return nil, fault("object key %s is not a string", fmt.Sprint(key.Interface()))
	}
	m := make(map[string]any, rv.Len())
	for iter := rv.MapRange(); iter.Next(); {
		m[iter.Key().String()] = iter.Value().Interface()
	}
	return jsonObject(m, depth)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

// Canonical returns the RFC 8785 (JSON Canonicalization Scheme) bytes of a JSON value, the
// bytes every implementation digests. v may be any value jsonValue takes: nil, bool,
// string, the Go integer and float types, json.Number, json.RawMessage, slices and arrays of
// JSON values, maps with string keys (Event among them). A value JSON cannot carry exactly is
// an *InvalidEventError naming the place at fault in its Field ("a.b[2]"), with Index -1.
func Canonical(v any) ([]byte, error) {
	plain, f := jsonValue(v, 1)
	if f != nil {
		return nil, &InvalidEventError{Reason: f.reason, Index: -1, Field: f.where()}
	}
	return canonicalPlain(plain)
}

// canonicalPlain is Canonical of a value jsonValue has made: encoding/json's bytes, brought
// to RFC 8785 form (key order by UTF-16 code units, ECMAScript numbers, minimal escapes) by
// jcs.Transform.
func canonicalPlain(plain any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// RFC 8785 escapes only what JSON must; jcs.Transform re-escapes strings in any case, and
	// the HTML escapes would only cost it work.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(plain); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	out, err := jcs.Transform(bytes.TrimRight(buf.Bytes(), "\n"))
	if err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	return out, nil
}

// digestOfParts is the lowercase hex sha256 of the canonical JSON array whose elements have
// the canonical bytes parts: RFC 8785 writes an array as its elements' forms joined by commas,
// between brackets, so this is the digest of the canonical form of the whole array.
func digestOfParts(parts [][]byte) string {
	h := sha256.New()
	h.Write([]byte{'['})
	for i, part := range parts {
		if i > 0 {
			h.Write([]byte{','})
		}
		h.Write(part)
	}
	h.Write([]byte{']'})
	return hex.EncodeToString(h.Sum(nil))
}
