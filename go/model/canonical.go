package model

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// The common types first, without reflection; a value already plain is handed back as it
	// came, since boxing it again would allocate.
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if !utf8.ValidString(x) {
			return nil, fault("string is not valid UTF-8")
		}
		return v, nil
	case bool:
		return v, nil
	case int64:
		if _, f := safeInt(x); f != nil {
			return nil, f
		}
		return v, nil
	case int:
		return safeInt(int64(x))
	case float64:
		if _, f := finite(x); f != nil {
			return nil, f
		}
		return v, nil
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
	var first firstFault
	for key, value := range m {
		if v, f := member(key, value, depth); f != nil {
			first.keep(key, f)
		} else {
			out[key] = v
		}
	}
	if first.fault != nil {
		return nil, first.fault
	}
	return out, nil
}

// member is the value of an object's member as jsonValue makes it, the object standing at
// nesting level depth, or the member's fault with its place.
func member(key string, value any, depth int) (any, *jsonFault) {
	if !utf8.ValidString(key) {
		return nil, fault("object key %s is not valid UTF-8", strconv.Quote(key))
	}
	v, f := jsonValue(value, depth+1)
	if f != nil {
		return nil, f.at("." + key)
	}
	return v, nil
}

// firstFault is, of the faults of an object's members walked in map order, the one of the
// member first in key order: the one a walk in key order meets first, so that of several
// faults the same one is named every time without the keys of every object being sorted.
type firstFault struct {
	key   string
	fault *jsonFault
}

func (ff *firstFault) keep(key string, f *jsonFault) {
	if ff.fault == nil || key < ff.key {
		ff.key, ff.fault = key, f
	}
}

// jsonMap is jsonObject of a map of another type with string keys, converted as it is walked.
func jsonMap(rv reflect.Value, depth int) (any, *jsonFault) {
	if rv.Type().Key().Kind() != reflect.String {
		if rv.Len() == 0 {
			return nil, fault("%s is not a JSON value: object keys are strings", rv.Type())
		}
		key := rv.MapKeys()[0]
		return nil, fault("object key %s is not a string", fmt.Sprint(key.Interface()))
	}
	if depth > MaxDepth {
		return nil, fault("nested more than %d levels deep", MaxDepth)
	}
	out := make(map[string]any, rv.Len())
	var first firstFault
	for iter := rv.MapRange(); iter.Next(); {
		key := iter.Key().String()
		if v, f := member(key, iter.Value().Interface(), depth); f != nil {
			first.keep(key, f)
		} else {
			out[key] = v
		}
	}
	if first.fault != nil {
		return nil, first.fault
	}
	return out, nil
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

// canonicalPlain is Canonical of a value jsonValue has made, in bytes of its own.
func canonicalPlain(plain any) ([]byte, error) {
	var w canonicalWriter
	return w.canonical(plain)
}

// canonicalWriter writes the RFC 8785 bytes of plain JSON values (jsonValue's: nil, bool,
// string, int64, float64, []any, map[string]any or Event, their strings and keys valid UTF-8)
// straight from the values, into a buffer it keeps from one value to the next. It replaced
// encoding/json's bytes brought to RFC 8785 form by jcs.Transform, which parsed again what
// encoding/json had just written and cost most of an append's preparation; the tests hold the
// two to the same bytes.
type canonicalWriter struct {
	buf     []byte
	members memberLists
}

// writers are canonical writers kept from one append to the next, so that an append of one
// event does not grow a buffer and member lists of its own.
var writers = sync.Pool{New: func() any { return new(canonicalWriter) }}

// maxKeptBuffer is the largest buffer a writer keeps when it is given back: an append of a
// large event should not hold its memory for every later one.
const maxKeptBuffer = 64 * 1024

func getWriter() *canonicalWriter { return writers.Get().(*canonicalWriter) }

// putWriter gives a writer back, its member lists emptied of the values they held, which
// are the caller's.
func putWriter(w *canonicalWriter) {
	if cap(w.buf) > maxKeptBuffer {
		w.buf = nil
	}
	for _, members := range w.members {
		clear(members[:cap(members)])
	}
	writers.Put(w)
}

// canonical is the RFC 8785 bytes of plain, in the writer's buffer: valid until its next use.
func (w *canonicalWriter) canonical(plain any) ([]byte, error) {
	buf, err := w.appendValue(w.buf[:0], plain, 0)
	w.buf = buf
	if err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	return buf, nil
}

func (w *canonicalWriter) appendValue(buf []byte, v any, depth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(buf, "null"...), nil
	case bool:
		return strconv.AppendBool(buf, x), nil
	case string:
		return appendString(buf, x), nil
	case int64:
		return appendInteger(buf, x)
	case float64:
		return appendNumber(buf, x)
	case []any:
		return w.appendArray(buf, x, depth)
	case map[string]any:
		return w.appendObject(buf, x, depth)
	case Event:
		return w.appendObject(buf, x, depth)
	}
	return buf, fmt.Errorf("%T is not a plain JSON value", v)
}

func (w *canonicalWriter) appendArray(buf []byte, items []any, depth int) ([]byte, error) {
	buf = append(buf, '[')
	for i, item := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = w.appendValue(buf, item, depth+1); err != nil {
			return buf, err
		}
	}
	return append(buf, ']'), nil
}

func (w *canonicalWriter) appendObject(buf []byte, m map[string]any, depth int) ([]byte, error) {
	members := w.members.sorted(m, depth, byUTF16)
	buf = append(buf, '{')
	for i, kv := range members {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(appendString(buf, kv.key), ':')
		var err error
		if buf, err = w.appendValue(buf, kv.value, depth+1); err != nil {
			return buf, err
		}
	}
	w.members.release(depth, members)
	return append(buf, '}'), nil
}

// appendInteger writes an integer as ECMAScript writes the number: its decimal digits, for
// every integer JSON carries exactly. One beyond +-MaxSafeInteger (jsonValue lets none through)
// is written as the double a reader of its digits would make of it.
func appendInteger(buf []byte, n int64) ([]byte, error) {
	if n < -MaxSafeInteger || n > MaxSafeInteger {
		return appendNumber(buf, float64(n))
	}
	return strconv.AppendInt(buf, n, 10), nil
}

// appendNumber writes a double as ECMAScript's Number.prototype.toString does, which RFC 8785
// prescribes (-0 as 0, exponents from 1e21 and below 1e-6): the reference implementation's
// own formatting.
func appendNumber(buf []byte, f float64) ([]byte, error) {
	text, err := jcs.NumberToJSON(f)
	if err != nil {
		return buf, err
	}
	return append(buf, text...), nil
}

// byUTF16 orders members as RFC 8785 does, by their keys' UTF-16 code units.
func byUTF16(a, b keyValue) int { return compareUTF16(a.key, b.key) }

// compareUTF16 orders two strings of valid UTF-8 by their UTF-16 code units, as RFC 8785
// sorts object keys. That is their byte order but for one pair of ranges: a character beyond
// the BMP (lead byte 0xF0-0xF4) is a surrogate pair in UTF-16, whose code units (0xD800-0xDFFF)
// sort below those of U+E000-U+FFFF (lead byte 0xEE or 0xEF), where its UTF-8 sorts above
// them. Two characters of the same lead byte, or of any other pair of ranges, compare in both
// encodings as their code points do, so the first byte that differs decides.
func compareUTF16(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca >= 0xee && cb >= 0xee && (ca >= 0xf0) != (cb >= 0xf0) {
			return cmp.Compare(cb, ca)
		}
		return cmp.Compare(ca, cb)
	}
	return cmp.Compare(len(a), len(b))
}

// keyValue is one member of an object.
type keyValue struct {
	key   string
	value any
}

// memberLists are the members of the objects being written, sorted by key, a list for each
// nesting level, kept from one object to the next so that ordering members allocates nothing
// once the lists have grown, and each value is taken as its key is, not looked up again.
type memberLists [][]keyValue

// sorted is the members of m in the order compare gives, in the list of level depth: the list
// is the caller's until it gives it back with release.
func (l *memberLists) sorted(m map[string]any, depth int, compare func(a, b keyValue) int) []keyValue {
	for len(*l) <= depth {
		*l = append(*l, nil)
	}
	members := (*l)[depth][:0]
	if cap(members) < len(m) {
		members = make([]keyValue, 0, len(m))
	}
	for key, value := range m {
		members = append(members, keyValue{key, value})
	}
	slices.SortFunc(members, compare)
	return members
}

// release gives back the list of level depth, grown as it may have been.
func (l *memberLists) release(depth int, members []keyValue) {
	(*l)[depth] = members[:0]
}

// arrayDigest is the sha256 of a canonical JSON array taken from its elements' canonical
// bytes one after another, each written once: RFC 8785 writes an array as its elements'
// forms joined by commas, between brackets, so this is the digest of the canonical form of
// the whole array.
type arrayDigest struct {
	h     hash.Hash
	empty bool
}

// The punctuation of an array, as slices made once: a literal handed to Write would be
// allocated on every call.
var (
	openBracket  = []byte{'['}
	comma        = []byte{','}
	closeBracket = []byte{']'}
)

func newArrayDigest() *arrayDigest {
	d := &arrayDigest{h: sha256.New(), empty: true}
	d.h.Write(openBracket)
	return d
}

// add takes the next element's canonical bytes.
func (d *arrayDigest) add(part []byte) {
	if !d.empty {
		d.h.Write(comma)
	}
	d.empty = false
	d.h.Write(part)
}

// hex is the digest of the array of the elements added, in lowercase hex.
func (d *arrayDigest) hex() string {
	d.h.Write(closeBracket)
	return hex.EncodeToString(d.h.Sum(nil))
}
