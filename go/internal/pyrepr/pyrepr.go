// Package pyrepr writes values as Python's repr does, for the messages the Python package
// formats with one, so that a message reads the same whichever language wrote it.
package pyrepr

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Repr is a JSON value as Python's repr writes it, for the messages the Python package formats
// with one ("t failed when first run: {'error': 'ValueError', 'message': 'no'}"). Object keys
// come sorted, as the payloads keep them; a map type of string keys (an event) is an object;
// anything else is written as fmt does.
func Repr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case string:
		writeStringRepr(b, x)
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		b.WriteString(floatRepr(x))
	case []any:
		b.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, item)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeStringRepr(b, k)
			b.WriteString(": ")
			writeRepr(b, x[k])
		}
		b.WriteByte('}')
	default:
		// A named map of string keys (model.Event, say) is an object; this package sits
		// below model, so it knows such types only by their shape.
		value := reflect.ValueOf(v)
		if object := reflect.TypeFor[map[string]any](); value.IsValid() && value.Type().ConvertibleTo(object) {
			writeRepr(b, value.Convert(object).Interface())
			return
		}
		fmt.Fprint(b, v)
	}
}

// floatRepr is repr(float): the shortest text that reads back the same, in positional
// notation from 1e-4 up to 1e16 (with ".0" when integral), else in exponent notation with a
// signed exponent of two digits at least.
func floatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	text := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mantissa, exponent, _ := strings.Cut(text, "e")
	exp, _ := strconv.Atoi(exponent)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		digits := strconv.Itoa(exp)
		if len(digits) < 2 {
			digits = "0" + digits
		}
		return mantissa + "e" + sign + digits
	}
	text = strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(text, ".") {
		text += ".0"
	}
	return text
}

// writeStringRepr writes repr(str): in single quotes, or double ones when the text holds a
// single quote and no double one; backslashes, the quote, \t \n \r and what is not printable
// escaped.
func writeStringRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(quote):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			b.WriteString(`\x`)
			writeHex(b, uint32(r), 2)
		case r < 0x10000:
			b.WriteString(`\u`)
			writeHex(b, uint32(r), 4)
		default:
			b.WriteString(`\U`)
			writeHex(b, uint32(r), 8)
		}
	}
	b.WriteByte(quote)
}

func writeHex(b *strings.Builder, n uint32, width int) {
	text := strconv.FormatUint(uint64(n), 16)
	b.WriteString(strings.Repeat("0", width-len(text)))
	b.WriteString(text)
}
