package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Large event fields are kept apart from their events as content-addressed artifacts
// (spec/ledger-v1.md section 3.11), as the Python package keeps them: an event whose canonical
// JSON passes the threshold keeps its largest content fields out of its payload, each stored
// once per session under the sha256 of its bytes (a string as its UTF-8 text, anything else as
// its RFC 8785 JSON), the payload holding a reference in its place: a msgpack extension value
// (type 1, the msgpack of [sha256, size, media type]) that no JSON value can be.
const (
	// ArtifactExt is the msgpack extension type of an ArtifactRef in a payload.
	ArtifactExt = 1
	// MediaText is the media type of an artifact made from a string: its UTF-8 text.
	MediaText = "text/plain; charset=utf-8"
	// MediaJSON is the media type of an artifact made from any other value: its RFC 8785 JSON.
	MediaJSON = "application/json"
	// DefaultArtifactThreshold is the canonical size above which an event keeps fields apart.
	DefaultArtifactThreshold = 64 * 1024
	// DefaultMaxArtifactBytes is the size an artifact may have at most.
	DefaultMaxArtifactBytes = 64 * 1024 * 1024
)

// refBytes is what a reference costs in an event's canonical size, about: a field moved out
// must save more.
const refBytes = 160

// frameFields say what an event is rather than what it carries: they are never moved out.
var frameFields = map[string]bool{
	"type": true, "agent": true, "event_id": true, "run_id": true, "step_id": true,
	"attempt_id": true, "parents": true, "tool": true, "status": true,
}

// ArtifactRef stands in an event's fields, as read with references left in, for a field kept
// apart as an artifact: the sha256 (lowercase hex) of its bytes, their size and media type
// (MediaText or MediaJSON).
type ArtifactRef struct {
	SHA256    string
	Size      int64
	MediaType string
}

// MarshalJSON writes the reference as every implementation shows it:
// {"artifact": "sha256:<hex>", "size": N, "media_type": "..."}.
func (r ArtifactRef) MarshalJSON() ([]byte, error) {
	return marshalNoEscape(struct {
		Artifact  string `json:"artifact"`
		Size      int64  `json:"size"`
		MediaType string `json:"media_type"`
	}{"sha256:" + r.SHA256, r.Size, r.MediaType})
}

// Value is the field's value from the artifact's bytes: the text of a MediaText artifact,
// the JSON value of any other (ints as int64, floats as float64, as Unpack gives them).
func (r ArtifactRef) Value(data []byte) (any, error) {
	if r.MediaType == MediaText {
		if !utf8.Valid(data) {
			return nil, fmt.Errorf("artifact sha256:%s is not valid UTF-8 text", r.SHA256)
		}
		return string(data), nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("artifact sha256:%s is not JSON: %w", r.SHA256, err)
	}
	return ReadNumbers(v), nil
}

// ReadNumbers turns the json.Number values of a value decoded with UseNumber (an event read
// from JSON text, say) into int64 (integer literals that fit) or float64, in place, as
// Python's json module reads them: what an event holds so that it is stored as Python would
// store it.
func ReadNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, f := jsonNumber(string(x)); f == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i, item := range x {
			x[i] = ReadNumbers(item)
		}
	case map[string]any:
		for key, item := range x {
			x[key] = ReadNumbers(item)
		}
	case Event:
		ReadNumbers(map[string]any(x))
	}
	return v
}

// Artifact is a field kept apart, to store: the sha256 (lowercase hex) of its bytes, the
// bytes, and their media type.
type Artifact struct {
	SHA256    string
	Data      []byte
	MediaType string
}

// Ref is the reference that stands for the artifact in its event's payload.
func (a Artifact) Ref() ArtifactRef {
	return ArtifactRef{SHA256: a.SHA256, Size: int64(len(a.Data)), MediaType: a.MediaType}
}

// ArtifactUse is how many fields of an append's events an artifact stands for.
type ArtifactUse struct {
	SHA256 string
	Count  int
}

// artifactOf is the artifact of a field's plain JSON value; canonical is its RFC 8785 bytes,
// when it is not a string.
func artifactOf(value any, canonical []byte) Artifact {
	data, media := canonical, MediaJSON
	if s, ok := value.(string); ok {
		data, media = []byte(s), MediaText
	}
	sum := sha256.Sum256(data)
	return Artifact{SHA256: hex.EncodeToString(sum[:]), Data: data, MediaType: media}
}

// movable is the fields of an event that may be moved out, in key order: all but the frame,
// and a mutation's kind, which names it.
func movable(fields Event) []string {
	mutation := fields["type"] == TypeMutation
	var out []string
	for _, name := range sortedKeys(fields) {
		if !frameFields[name] && !(mutation && name == "kind") {
			out = append(out, name)
		}
	}
	return out
}

// CheckSHA256 returns an artifact's sha256 as the stores key it, 64 lowercase hex digits,
// from text that may begin "sha256:" and be in either case; an InvalidInput error else.
func CheckSHA256(text string) (string, error) {
	digest := strings.ToLower(strings.TrimPrefix(text, "sha256:"))
	if len(digest) != 64 || strings.Trim(digest, "0123456789abcdef") != "" {
		return "", Errorf(ErrInvalidInput, "not a sha256: %s", quoted(text, 80))
	}
	return digest, nil
}

// RefsIn returns the references among an event's fields, in the order of their names.
func RefsIn(fields Event) []ArtifactRef {
	var refs []ArtifactRef
	for _, name := range sortedKeys(fields) {
		if ref, ok := fields[name].(ArtifactRef); ok {
			refs = append(refs, ref)
		}
	}
	return refs
}

// Resolve returns the fields with each reference replaced by its value, the bytes read with
// fetch; fields itself is not changed. The first error of fetch, or of bytes that are not
// what the reference says, is returned.
func Resolve(fields Event, fetch func(ArtifactRef) ([]byte, error)) (Event, error) {
	out := make(Event, len(fields))
	for name, value := range fields {
		ref, ok := value.(ArtifactRef)
		if !ok {
			out[name] = value
			continue
		}
		data, err := fetch(ref)
		if err != nil {
			return nil, err
		}
		if out[name], err = ref.Value(data); err != nil {
			return nil, Errorf(ErrUnexpectedReply, "field '%s': %v", name, err)
		}
	}
	return out, nil
}

// pack is an event's payload: its fields in msgpack, each ArtifactRef as an extension value.
// Python decodes it to the same values (map keys come sorted; Python keeps its own order, and
// no reader depends on either). fields holds plain JSON values (jsonValue's) and references.
func pack(fields Event) ([]byte, error) {
	p := newPacker(0, new(memberLists))
	if err := p.add(fields); err != nil {
		return nil, err
	}
	return p.payloads()[0], nil
}

// packer writes the payloads of one append one after another into one buffer, with one
// encoder and member lists kept from one map to the next: an encoder, a buffer and a list of
// keys for each event cost the append an allocation each.
type packer struct {
	buf     bytes.Buffer
	enc     *msgpack.Encoder
	members *memberLists
	ends    []int
}

// newPacker is a packer whose buffer holds size bytes before it grows, sorting maps' members
// in members: lists it borrows, which a canonical writer may share as long as the two do not
// write at once.
func newPacker(size int, members *memberLists) *packer {
	p := &packer{members: members}
	p.buf.Grow(size)
	p.enc = msgpack.NewEncoder(&p.buf)
	return p
}

// add packs the next event's fields.
func (p *packer) add(fields Event) error {
	if err := p.value(map[string]any(fields), 0); err != nil {
		return err
	}
	p.ends = append(p.ends, p.buf.Len())
	return nil
}

// payloads is each event's payload, in the order they were added, each a slice of the
// packer's buffer of its own capacity.
func (p *packer) payloads() [][]byte {
	data := p.buf.Bytes()
	out := make([][]byte, len(p.ends))
	start := 0
	for i, end := range p.ends {
		out[i] = data[start:end:end]
		start = end
	}
	return out
}

func (p *packer) value(v any, depth int) error {
	enc := p.enc
	switch x := v.(type) {
	case nil:
		return enc.EncodeNil()
	case bool:
		return enc.EncodeBool(x)
	case string:
		return enc.EncodeString(x)
	case int64:
		// The smallest form, as Python's msgpack writes integers.
		return enc.EncodeInt(x)
	case float64:
		// Always a double: a float stays a float, as Python's does, even when it is integral.
		return enc.EncodeFloat64(x)
	case []any:
		if err := enc.EncodeArrayLen(len(x)); err != nil {
			return err
		}
		for _, item := range x {
			if err := p.value(item, depth+1); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		return p.object(x, depth)
	case Event:
		return p.object(x, depth)
	case ArtifactRef:
		return packRef(enc, x)
	}
	return fmt.Errorf("cannot pack %T", v)
}

// object packs a map, its keys in byte order: a payload's bytes are the same every time.
func (p *packer) object(m map[string]any, depth int) error {
	if err := p.enc.EncodeMapLen(len(m)); err != nil {
		return err
	}
	members := p.members.sorted(m, depth, byBytes)
	for _, kv := range members {
		if err := p.enc.EncodeString(kv.key); err != nil {
			return err
		}
		if err := p.value(kv.value, depth+1); err != nil {
			return err
		}
	}
	p.members.release(depth, members)
	return nil
}

// byBytes orders members by their keys' bytes, which is by code points.
func byBytes(a, b keyValue) int { return strings.Compare(a.key, b.key) }

// packRef packs a reference as its extension value, whose data is the msgpack of
// [sha256, size, media type].
func packRef(enc *msgpack.Encoder, ref ArtifactRef) error {
	var inner bytes.Buffer
	ie := msgpack.NewEncoder(&inner)
	if err := errors.Join(ie.EncodeArrayLen(3), ie.EncodeString(ref.SHA256),
		ie.EncodeInt(ref.Size), ie.EncodeString(ref.MediaType)); err != nil {
		return err
	}
	if err := enc.EncodeExtHeader(ArtifactExt, inner.Len()); err != nil {
		return err
	}
	_, err := enc.Writer().Write(inner.Bytes())
	return err
}

// maxUnpackDepth bounds how deeply a payload may nest: twice what an event may, so that any
// payload the ledger wrote is read and a hostile one cannot recurse without end.
const maxUnpackDepth = 2 * MaxDepth

// Unpack returns an event's fields from its payload, as any implementation wrote it: every
// integer as int64, floats as float64, strings, bools, nil, []any, map[string]any (the event
// itself as an Event), and each reference to an artifact as an ArtifactRef. A payload that is
// not an event's (not a map, trailing bytes, binary values, other extension types, map keys
// that are not strings, text that is not UTF-8) is an error of kind ErrUnexpectedReply.
func Unpack(payload []byte) (Event, error) {
	r := bytes.NewReader(payload)
	dec := msgpack.NewDecoder(r)
	u := unpacker{dec: dec, r: r}
	v, err := u.value(1)
	if err == nil && r.Len() > 0 {
		err = fmt.Errorf("%d bytes after the event", r.Len())
	}
	if err == nil {
		if m, ok := v.(map[string]any); ok {
			return Event(m), nil
		}
		err = fmt.Errorf("the payload is a %T, not a map", v)
	}
	return nil, &Error{Kind: ErrUnexpectedReply, Msg: "not an event's payload: " + err.Error(), Cause: err}
}

type unpacker struct {
	dec *msgpack.Decoder
	r   *bytes.Reader // what dec reads, unbuffered: its Len bounds every length read
}

// length checks a length read from the payload against what is left of it: every item takes
// a byte at least, so no hostile length makes Unpack allocate more than the payload's size.
func (u *unpacker) length(n int, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if n < 0 || n > u.r.Len() {
		return 0, fmt.Errorf("a length of %d with %d bytes left", n, u.r.Len())
	}
	return n, nil
}

func (u *unpacker) value(depth int) (any, error) {
	c, err := u.dec.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		return nil, u.dec.DecodeNil()
	case c == msgpcode.False || c == msgpcode.True:
		return u.dec.DecodeBool()
	case c == msgpcode.Float || c == msgpcode.Double:
		return u.dec.DecodeFloat64()
	case c == msgpcode.Uint64:
		n, err := u.dec.DecodeUint64()
		if err == nil && n > math.MaxInt64 {
			err = fmt.Errorf("integer %d out of range", n)
		}
		return int64(n), err
	case msgpcode.IsFixedNum(c), c == msgpcode.Uint8, c == msgpcode.Uint16, c == msgpcode.Uint32,
		c == msgpcode.Int8, c == msgpcode.Int16, c == msgpcode.Int32, c == msgpcode.Int64:
		return u.dec.DecodeInt64()
	case msgpcode.IsString(c):
		return u.text()
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if depth > maxUnpackDepth {
			return nil, errors.New("nested too deeply")
		}
		n, err := u.length(u.dec.DecodeArrayLen())
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = u.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		if depth > maxUnpackDepth {
			return nil, errors.New("nested too deeply")
		}
		n, err := u.length(u.dec.DecodeMapLen())
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, n)
		for range n {
			key, err := u.key()
			if err != nil {
				return nil, err
			}
			if out[key], err = u.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case msgpcode.IsExt(c):
		return u.ref()
	}
	return nil, fmt.Errorf("unexpected msgpack code 0x%02x", c)
}

func (u *unpacker) text() (string, error) {
	s, err := u.dec.DecodeString()
	if err == nil && !utf8.ValidString(s) {
		err = errors.New("a string that is not valid UTF-8")
	}
	return s, err
}

func (u *unpacker) key() (string, error) {
	c, err := u.dec.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("a map key of msgpack code 0x%02x, not a string", c)
	}
	return u.text()
}

// ref reads an extension value: an ArtifactRef, the only one a payload holds.
func (u *unpacker) ref() (any, error) {
	id, n, err := u.dec.DecodeExtHeader()
	if n, err = u.length(n, err); err != nil {
		return nil, err
	}
	if id != ArtifactExt {
		return nil, fmt.Errorf("a msgpack extension of type %d", id)
	}
	data := make([]byte, n)
	if err := u.dec.ReadFull(data); err != nil {
		return nil, err
	}
	r := bytes.NewReader(data)
	inner := unpacker{dec: msgpack.NewDecoder(r), r: r}
	v, err := inner.value(maxUnpackDepth)
	if err != nil {
		return nil, fmt.Errorf("an artifact reference: %w", err)
	}
	items, _ := v.([]any)
	if len(items) != 3 || r.Len() > 0 {
		return nil, errors.New("an artifact reference that is not [sha256, size, media type]")
	}
	sha, ok1 := items[0].(string)
	size, ok2 := items[1].(int64)
	media, ok3 := items[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return nil, errors.New("an artifact reference that is not [sha256, size, media type]")
	}
	return ArtifactRef{SHA256: sha, Size: size, MediaType: media}, nil
}

// marshalNoEscape is json.Marshal without its HTML escapes, which no other implementation
// writes.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
