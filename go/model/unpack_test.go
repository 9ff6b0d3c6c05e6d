package model

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestUnpackRefuses(t *testing.T) {
	ref := func(inner string) string {
		return "81a172c7" + hex.EncodeToString([]byte{byte(len(inner) / 2)}) + "01" + inner
	}
	cases := map[string]string{
		"nothing":                "",
		"not a map":              "93010203",
		"a truncated map":        "82a161",
		"a truncated string":     "81a161a5ab",
		"trailing bytes":         "80c0",
		"binary":                 "81a162c40101",
		"a key that is a number": "8101c0",
		"invalid UTF-8":          "81a161a1ff",
		"another extension":      "81a172d40200",
		"a huge map length":      "df7fffffff",
		"a huge array length":    "81a161dd7fffffff",
		"a uint64 beyond int64":  "81a16ecfffffffffffffffff",
		"a reference of 2 items": ref("92a13101"),
		"a reference of a map":   ref("80"),
		"a reference sized text": ref("93a131a132a133"),
		"an unknown code":        "81a161c1",
	}
	for name, hexed := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := hex.DecodeString(hexed)
			if err != nil {
				t.Fatal(err)
			}
			fields, err := Unpack(data)
			if err == nil {
				t.Fatalf("took it: %v", fields)
			}
			if !errors.Is(err, ErrUnexpectedReply) {
				t.Errorf("error %v is not an UnexpectedReply", err)
			}
		})
	}
	// Nesting beyond what any event holds is refused, not followed down the stack.
	deep := strings.Repeat("91", 100_000) + "c0"
	data, _ := hex.DecodeString("81a161" + deep)
	if _, err := Unpack(data); err == nil {
		t.Error("took 100000 levels")
	}
}

func TestUnpackTypes(t *testing.T) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	// Every msgpack integer and float width, as any writer may choose them.
	_ = enc.EncodeMapLen(9)
	for _, kv := range []struct {
		k string
		f func() error
	}{
		{"u8", func() error { return enc.EncodeUint8(200) }},
		{"u16", func() error { return enc.EncodeUint16(60000) }},
		{"u32", func() error { return enc.EncodeUint32(4e9) }},
		{"u64", func() error { return enc.EncodeUint64(1 << 60) }},
		{"i8", func() error { return enc.EncodeInt8(-100) }},
		{"i64", func() error { return enc.EncodeInt64(-1 << 60) }},
		{"f32", func() error { return enc.EncodeFloat32(0.5) }},
		{"f64", func() error { return enc.EncodeFloat64(1) }},
		{"ref", func() error {
			return packRef(enc, ArtifactRef{SHA256: strings.Repeat("0", 64), Size: 3, MediaType: MediaJSON})
		}},
	} {
		_ = enc.EncodeString(kv.k)
		if err := kv.f(); err != nil {
			t.Fatal(err)
		}
	}
	fields, err := Unpack(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := Event{"u8": int64(200), "u16": int64(60000), "u32": int64(4e9), "u64": int64(1 << 60),
		"i8": int64(-100), "i64": int64(-1 << 60), "f32": 0.5, "f64": 1.0,
		"ref": ArtifactRef{SHA256: strings.Repeat("0", 64), Size: 3, MediaType: MediaJSON}}
	if d := differs(fields, want, "fields"); d != "" {
		t.Errorf("differs at %s", d)
	}
}

// FuzzUnpack holds that no bytes make Unpack panic, and that what it reads packs and reads
// back the same.
func FuzzUnpack(f *testing.F) {
	for _, a := range readGolden(f).Appends {
		for _, hexed := range a.Payloads {
			data, _ := hex.DecodeString(hexed)
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fields, err := Unpack(data)
		if err != nil {
			return
		}
		packed, err := pack(fields)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Unpack(packed)
		if err != nil {
			t.Fatal(err)
		}
		if d := differs(again, fields, "fields"); d != "" {
			t.Fatalf("read back differently at %s", d)
		}
	})
}
