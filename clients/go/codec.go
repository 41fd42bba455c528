// Package agentstate is the Go client of the Agent State Sidecar (agentstate.v1).
//
// Generated messages and stubs live in
// github.com/agentstate/sidecar/clients/go/gen/agentstate/v1; this package adds
// the value encoding (MessagePack with the agentstate extension types,
// docs/encoding.md), typed errors, and a thin client with deadlines, retries,
// paging iterators and a resumable watch helper.
package agentstate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Extension type codes of the agentstate encoding.
const (
	ExtBigInt   = 1
	ExtDateTime = 2
	ExtUUID     = 3
	ExtDecimal  = 4
	ExtSet      = 5
	ExtOpaque   = 6
	// MaxDepth is how deep containers (lists, maps, sets) may nest.
	MaxDepth = 64
)

// MicrosMin and MicrosMax bound datetimes: 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999.
const (
	MicrosMin    int64 = -62135596800000000
	MicrosMax    int64 = 253402300799999999
	offsetLimit        = 86400
	canonicalNaN       = 0x7ff8000000000000
)

// UnsupportedValueError says a value cannot be encoded or decoded; Path locates it ("$" is the value itself).
type UnsupportedValueError struct {
	Reason string
	Path   string
}

func (e *UnsupportedValueError) Error() string { return e.Path + ": " + e.Reason }

func unsupported(format string, args ...any) *UnsupportedValueError {
	return &UnsupportedValueError{Reason: fmt.Sprintf(format, args...), Path: "$"}
}

func under(err error, step string) error {
	var u *UnsupportedValueError
	if errors.As(err, &u) {
		return &UnsupportedValueError{Reason: u.Reason, Path: "$" + step + u.Path[1:]}
	}
	return err
}

// Opaque is a framework's own serialisation, stored verbatim; Type names the format.
type Opaque struct {
	Type string
	Data []byte
}

// UUID is a UUID (16 bytes). It converts to and from github.com/google/uuid.UUID.
type UUID [16]byte

// ParseUUID reads the usual 36-character form (hyphens optional).
func ParseUUID(s string) (UUID, error) {
	var u UUID
	h := strings.ReplaceAll(strings.TrimPrefix(strings.Trim(s, "{}"), "urn:uuid:"), "-", "")
	if len(h) != 32 {
		return u, unsupported("not a UUID: %q", s)
	}
	for i := 0; i < 16; i++ {
		var b byte
		if _, err := fmt.Sscanf(h[2*i:2*i+2], "%02x", &b); err != nil {
			return u, unsupported("not a UUID: %q", s)
		}
		u[i] = b
	}
	return u, nil
}

func (u UUID) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Decimal is a decimal number kept as its canonical text: what Python's
// str(Decimal(text)) gives, so "1.10" and "1.1" stay distinct and "1.1e0" becomes "1.1".
type Decimal struct{ text string }

// NewDecimal parses and canonicalises a decimal ("1.10", "-1E+3", "NaN", "-Infinity").
func NewDecimal(text string) (Decimal, error) {
	t, err := CanonicalDecimal(text)
	return Decimal{t}, err
}

// MustDecimal is NewDecimal that panics on malformed text.
func MustDecimal(text string) Decimal {
	d, err := NewDecimal(text)
	if err != nil {
		panic(err)
	}
	return d
}

func (d Decimal) String() string { return d.text }

// Set is a set; encoding sorts its elements by their canonical encodings and drops duplicates.
type Set []any

// DateTimeKind says how a DateTime relates to UTC.
type DateTimeKind uint8

const (
	// Naive: a wall-clock time without a zone.
	Naive DateTimeKind = 0
	// Offset: an instant with a fixed UTC offset.
	Offset DateTimeKind = 1
	// Zone: an instant in an IANA zone (with the offset at that instant).
	Zone DateTimeKind = 2
)

// DateTime is a datetime with microsecond precision (docs/encoding.md, ext 2).
// Micros counts from 1970-01-01T00:00:00: of the UTC instant (Offset, Zone) or
// of the wall clock read as UTC (Naive).
type DateTime struct {
	Micros        int64
	Kind          DateTimeKind
	OffsetSeconds int32
	Zone          string
}

// FromTime is t as an Offset datetime (its offset at that instant); nanoseconds are truncated to microseconds.
func FromTime(t time.Time) DateTime {
	_, off := t.Zone()
	return DateTime{Micros: unixMicros(t), Kind: Offset, OffsetSeconds: int32(off)}
}

// unixMicros is t in microseconds since the epoch, rounded down (UnixMicro overflows outside 1678..2262).
func unixMicros(t time.Time) int64 {
	return t.Unix()*1_000_000 + int64(t.Nanosecond()/1000)
}

// InZone is t as a Zone datetime in its own location (t.Location().String() must be an IANA name).
func InZone(t time.Time) DateTime {
	d := FromTime(t)
	d.Kind = Zone
	d.Zone = t.Location().String()
	return d
}

// NaiveTime is the wall clock of t (its location ignored) as a Naive datetime.
func NaiveTime(t time.Time) DateTime {
	w := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	return DateTime{Micros: unixMicros(w), Kind: Naive}
}

// Time is the datetime as a time.Time: in its zone when the zone database knows it,
// otherwise at its fixed offset; a Naive datetime comes back in UTC.
func (d DateTime) Time() time.Time {
	t := fromMicros(d.Micros)
	switch d.Kind {
	case Naive:
		return t
	case Zone:
		if loc, err := time.LoadLocation(d.Zone); err == nil {
			return t.In(loc)
		}
	}
	if d.OffsetSeconds == 0 && d.Kind == Offset {
		return t
	}
	return t.In(time.FixedZone("", int(d.OffsetSeconds)))
}

// String is ISO 8601 of the wall time with the offset (and [zone]) unless naive.
func (d DateTime) String() string {
	wall := d.Micros
	if d.Kind != Naive {
		wall += int64(d.OffsetSeconds) * 1_000_000
	}
	t := fromMicros(wall)
	s := t.Format("2006-01-02T15:04:05")
	if us := t.Nanosecond() / 1000; us != 0 {
		s += fmt.Sprintf(".%06d", us)
	}
	if d.Kind != Naive {
		o := d.OffsetSeconds
		sign := "+"
		if o < 0 {
			sign, o = "-", -o
		}
		s += fmt.Sprintf("%s%02d:%02d", sign, o/3600, o/60%60)
		if o%60 != 0 {
			s += fmt.Sprintf(":%02d", o%60)
		}
	}
	if d.Kind == Zone {
		s += "[" + d.Zone + "]"
	}
	return s
}

func fromMicros(us int64) time.Time {
	sec, rest := us/1_000_000, us%1_000_000
	if rest < 0 {
		sec, rest = sec-1, rest+1_000_000
	}
	return time.Unix(sec, rest*1000).UTC()
}

func (d DateTime) payload() ([]byte, error) {
	if d.Micros < MicrosMin || d.Micros > MicrosMax {
		return nil, unsupported("datetime out of range")
	}
	out := []byte{byte(d.Kind)}
	out = be64(out, uint64(d.Micros))
	switch d.Kind {
	case Naive:
		return out, nil
	case Offset, Zone:
		if d.OffsetSeconds <= -offsetLimit || d.OffsetSeconds >= offsetLimit {
			return nil, unsupported("datetime UTC offset must be whole seconds under 24 hours")
		}
		out = append(out, byte(uint32(d.OffsetSeconds)>>24), byte(uint32(d.OffsetSeconds)>>16),
			byte(uint32(d.OffsetSeconds)>>8), byte(uint32(d.OffsetSeconds)))
		if d.Kind == Zone {
			if len(d.Zone) == 0 || len(d.Zone) > 255 || !utf8.ValidString(d.Zone) {
				return nil, unsupported("datetime zone name must be 1 to 255 bytes of UTF-8")
			}
			out = append(out, d.Zone...)
		}
		return out, nil
	}
	return nil, unsupported("unknown datetime kind %d", d.Kind)
}

func be64(b []byte, x uint64) []byte {
	for i := 7; i >= 0; i-- {
		b = append(b, byte(x>>(8*i)))
	}
	return b
}

func rd64(b []byte) int64 {
	var x uint64
	for _, c := range b[:8] {
		x = x<<8 | uint64(c)
	}
	return int64(x)
}

// CanonicalDecimal is Python's str(Decimal(text)): the canonical decimal text.
func CanonicalDecimal(text string) (string, error) {
	t := strings.TrimSpace(text)
	sign := ""
	body := t
	if strings.HasPrefix(body, "+") || strings.HasPrefix(body, "-") {
		if body[0] == '-' {
			sign = "-"
		}
		body = body[1:]
	}
	low := strings.ToLower(body)
	switch {
	case low == "inf" || low == "infinity":
		return sign + "Infinity", nil
	case strings.HasPrefix(low, "nan") || strings.HasPrefix(low, "snan"):
		name, digits := "NaN", low[3:]
		if low[0] == 's' {
			name, digits = "sNaN", low[4:]
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return "", unsupported("malformed decimal %q", text)
			}
		}
		return sign + name + strings.TrimLeft(digits, "0"), nil
	}
	mant, exp := body, "0"
	if i := strings.IndexAny(body, "eE"); i >= 0 {
		mant, exp = body[:i], body[i+1:]
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	if intPart+frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return "", unsupported("malformed decimal %q", text)
	}
	e, ok := new(big.Int).SetString(strings.TrimPrefix(exp, "+"), 10)
	if !ok || exp == "" || strings.HasPrefix(exp, "+-") || strings.HasPrefix(exp, "-+") {
		return "", unsupported("malformed decimal %q", text)
	}
	coeff := strings.TrimLeft(intPart+frac, "0")
	if coeff == "" {
		coeff = "0"
	}
	e.Sub(e, big.NewInt(int64(len(frac))))
	adjusted := new(big.Int).Add(e, big.NewInt(int64(len(coeff)-1)))
	if e.Sign() <= 0 && adjusted.Cmp(big.NewInt(-6)) >= 0 {
		n := int(e.Int64())
		switch {
		case n == 0:
			return sign + coeff, nil
		case len(coeff) > -n:
			return sign + coeff[:len(coeff)+n] + "." + coeff[len(coeff)+n:], nil
		default:
			return sign + "0." + strings.Repeat("0", -n-len(coeff)) + coeff, nil
		}
	}
	s := coeff[:1]
	if len(coeff) > 1 {
		s += "." + coeff[1:]
	}
	if adjusted.Sign() >= 0 {
		s += "E+" + adjusted.String()
	} else {
		s += "E" + adjusted.String()
	}
	return sign + s, nil
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------- encoder

var (
	int64Min  = big.NewInt(math.MinInt64)
	uint64Max = new(big.Int).SetUint64(math.MaxUint64)
)

func bigIntPayload(n *big.Int) []byte {
	// Minimal signed big-endian two's complement.
	magnitude := new(big.Int).Set(n)
	if n.Sign() < 0 {
		magnitude.Not(n) // ~n = -n - 1
	}
	size := magnitude.BitLen()/8 + 1
	v := new(big.Int).Set(n)
	if n.Sign() < 0 {
		v.Add(v, new(big.Int).Lsh(big.NewInt(1), uint(size*8)))
	}
	out := make([]byte, size)
	v.FillBytes(out)
	return out
}

func opaquePayload(o Opaque) ([]byte, error) {
	if len(o.Type) == 0 || len(o.Type) > 255 {
		return nil, unsupported("opaque type must be 1 to 255 UTF-8 bytes")
	}
	if !utf8.ValidString(o.Type) {
		return nil, unsupported("opaque type is not valid UTF-8")
	}
	out := make([]byte, 0, 1+len(o.Type)+len(o.Data))
	out = append(out, byte(len(o.Type)))
	out = append(out, o.Type...)
	return append(out, o.Data...), nil
}

type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newEncoder() *encoder {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	e.enc.UseCompactInts(true)
	return e
}

func (e *encoder) ext(code int8, data []byte) error {
	if err := e.enc.EncodeExtHeader(code, len(data)); err != nil {
		return err
	}
	_, err := e.enc.Writer().Write(data)
	return err
}

func (e *encoder) float(f float64) error {
	if f != f {
		f = math.Float64frombits(canonicalNaN)
	}
	return e.enc.EncodeFloat64(f)
}

func (e *encoder) str(s string) error {
	if !utf8.ValidString(s) {
		return unsupported("string is not valid UTF-8")
	}
	return e.enc.EncodeString(s)
}

func (e *encoder) bigint(n *big.Int) error {
	if n.Cmp(int64Min) >= 0 && n.Cmp(uint64Max) <= 0 {
		if n.IsInt64() {
			return e.enc.EncodeInt(n.Int64())
		}
		return e.enc.EncodeUint(n.Uint64())
	}
	return e.ext(ExtBigInt, bigIntPayload(n))
}

func (e *encoder) mapEntries(keys []string, get func(string) any, depth int) error {
	if depth >= MaxDepth {
		return unsupported("nested deeper than %d", MaxDepth)
	}
	sort.Strings(keys) // Go compares strings bytewise: UTF-8 byte order
	if err := e.enc.EncodeMapLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if err := e.str(k); err != nil {
			return under(err, reprKey(k))
		}
		if err := e.value(get(k), depth+1); err != nil {
			return under(err, reprKey(k))
		}
	}
	return nil
}

// reprKey is a map step of an error path, quoted like the other clients: ['key'].
func reprKey(k string) string {
	return "['" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(k) + "']"
}

func (e *encoder) list(n int, get func(int) any, depth int) error {
	if depth >= MaxDepth {
		return unsupported("nested deeper than %d", MaxDepth)
	}
	if err := e.enc.EncodeArrayLen(n); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := e.value(get(i), depth+1); err != nil {
			return under(err, fmt.Sprintf("[%d]", i))
		}
	}
	return nil
}

func (e *encoder) set(items []any, depth int) error {
	if depth >= MaxDepth {
		return unsupported("nested deeper than %d", MaxDepth)
	}
	encoded := make([][]byte, 0, len(items))
	for i, item := range items {
		sub := newEncoder()
		if err := sub.value(item, depth+1); err != nil {
			return under(err, fmt.Sprintf("{set}[%d]", i))
		}
		encoded = append(encoded, sub.buf.Bytes())
	}
	slices.SortFunc(encoded, bytes.Compare)
	encoded = slices.CompactFunc(encoded, bytes.Equal)
	sub := newEncoder()
	if err := sub.enc.EncodeArrayLen(len(encoded)); err != nil {
		return err
	}
	for _, b := range encoded {
		sub.buf.Write(b)
	}
	return e.ext(ExtSet, sub.buf.Bytes())
}

func (e *encoder) value(v any, depth int) error {
	switch x := v.(type) {
	case nil:
		return e.enc.EncodeNil()
	case bool:
		return e.enc.EncodeBool(x)
	case int:
		return e.enc.EncodeInt(int64(x))
	case int8:
		return e.enc.EncodeInt(int64(x))
	case int16:
		return e.enc.EncodeInt(int64(x))
	case int32:
		return e.enc.EncodeInt(int64(x))
	case int64:
		return e.enc.EncodeInt(x)
	case uint:
		return e.enc.EncodeUint(uint64(x))
	case uint8:
		return e.enc.EncodeUint(uint64(x))
	case uint16:
		return e.enc.EncodeUint(uint64(x))
	case uint32:
		return e.enc.EncodeUint(uint64(x))
	case uint64:
		return e.enc.EncodeUint(x)
	case float32:
		return e.float(float64(x))
	case float64:
		return e.float(x)
	case string:
		return e.str(x)
	case []byte:
		return e.enc.EncodeBytes(x)
	case *big.Int:
		if x == nil {
			return e.enc.EncodeNil()
		}
		return e.bigint(x)
	case big.Int:
		return e.bigint(&x)
	case []any:
		return e.list(len(x), func(i int) any { return x[i] }, depth)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		return e.mapEntries(keys, func(k string) any { return x[k] }, depth)
	case Set:
		return e.set(x, depth)
	case DateTime:
		p, err := x.payload()
		if err != nil {
			return err
		}
		return e.ext(ExtDateTime, p)
	case time.Time:
		p, err := FromTime(x).payload()
		if err != nil {
			return err
		}
		return e.ext(ExtDateTime, p)
	case UUID:
		return e.ext(ExtUUID, x[:])
	case Decimal:
		if x.text == "" {
			return unsupported("zero Decimal: use NewDecimal")
		}
		return e.ext(ExtDecimal, []byte(x.text))
	case Opaque:
		p, err := opaquePayload(x)
		if err != nil {
			return err
		}
		return e.ext(ExtOpaque, p)
	}
	// Other slices, arrays and string-keyed maps, by reflection.
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return e.enc.EncodeNil()
		}
		return e.value(rv.Elem().Interface(), depth)
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return e.enc.EncodeNil()
		}
		return e.list(rv.Len(), func(i int) any { return rv.Index(i).Interface() }, depth)
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return unsupported("map key type %s is not a string", rv.Type().Key())
		}
		keys := make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			keys = append(keys, k.String())
		}
		return e.mapEntries(keys, func(k string) any {
			return rv.MapIndex(reflect.ValueOf(k).Convert(rv.Type().Key())).Interface()
		}, depth)
	}
	return unsupported("unsupported type %T", v)
}

// Encode returns the canonical encoding of a Go value (an *UnsupportedValueError names the path).
func Encode(v any) ([]byte, error) {
	e := newEncoder()
	if err := e.value(v, 0); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

// MustEncode is Encode that panics.
func MustEncode(v any) []byte {
	b, err := Encode(v)
	if err != nil {
		panic(err)
	}
	return b
}

// ---------------------------------------------------------------- decoder

type decoder struct {
	r   *bytes.Reader
	dec *msgpack.Decoder
}

func malformed(err error) error {
	if err == nil {
		return nil
	}
	var u *UnsupportedValueError
	if errors.As(err, &u) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return unsupported("not valid MessagePack: truncated")
	}
	return unsupported("not valid MessagePack: %v", err)
}

func (d *decoder) value(depth int) (any, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return nil, malformed(err)
	}
	switch {
	case c == msgpcode.Nil:
		return nil, malformed(d.dec.DecodeNil())
	case c == msgpcode.True || c == msgpcode.False:
		b, err := d.dec.DecodeBool()
		return b, malformed(err)
	case msgpcode.IsFixedNum(c) && c <= msgpcode.PosFixedNumHigh,
		c == msgpcode.Uint8, c == msgpcode.Uint16, c == msgpcode.Uint32, c == msgpcode.Uint64:
		n, err := d.dec.DecodeUint64()
		if err != nil {
			return nil, malformed(err)
		}
		if n <= math.MaxInt64 {
			return int64(n), nil
		}
		return n, nil
	case msgpcode.IsFixedNum(c), c == msgpcode.Int8, c == msgpcode.Int16, c == msgpcode.Int32, c == msgpcode.Int64:
		n, err := d.dec.DecodeInt64()
		return n, malformed(err)
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := d.dec.DecodeFloat64()
		return f, malformed(err)
	case msgpcode.IsString(c):
		n, err := d.dec.DecodeBytesLen()
		if err != nil {
			return nil, malformed(err)
		}
		b := make([]byte, max(n, 0))
		if err := d.dec.ReadFull(b); err != nil {
			return nil, malformed(err)
		}
		if !utf8.Valid(b) {
			return nil, unsupported("string is not valid UTF-8")
		}
		return string(b), nil
	case msgpcode.IsBin(c):
		b, err := d.dec.DecodeBytes()
		if b == nil && err == nil {
			b = []byte{}
		}
		return b, malformed(err)
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if depth >= MaxDepth {
			return nil, unsupported("nested deeper than %d", MaxDepth)
		}
		n, err := d.dec.DecodeArrayLen()
		if err != nil {
			return nil, malformed(err)
		}
		if n > d.r.Len() {
			return nil, unsupported("not valid MessagePack: truncated")
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		if depth >= MaxDepth {
			return nil, unsupported("nested deeper than %d", MaxDepth)
		}
		n, err := d.dec.DecodeMapLen()
		if err != nil {
			return nil, malformed(err)
		}
		if n > d.r.Len() {
			return nil, unsupported("not valid MessagePack: truncated")
		}
		out := make(map[string]any, n)
		for i := 0; i < n; i++ {
			k, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, unsupported("map key %v is not a string", k)
			}
			if out[ks], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case msgpcode.IsExt(c):
		id, n, err := d.dec.DecodeExtHeader()
		if err != nil {
			return nil, malformed(err)
		}
		if n > d.r.Len() {
			return nil, unsupported("not valid MessagePack: truncated")
		}
		data := make([]byte, n)
		if err := d.dec.ReadFull(data); err != nil {
			return nil, malformed(err)
		}
		return extValue(id, data, depth)
	}
	return nil, unsupported("not valid MessagePack: byte 0x%02x", c)
}

func extValue(id int8, data []byte, depth int) (any, error) {
	switch id {
	case ExtBigInt:
		if len(data) == 0 {
			return nil, unsupported("empty big int extension")
		}
		n := new(big.Int).SetBytes(data)
		if data[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(data))))
		}
		if n.IsInt64() {
			return n.Int64(), nil
		}
		if n.IsUint64() {
			return n.Uint64(), nil
		}
		return n, nil
	case ExtDateTime:
		n := len(data)
		switch {
		case n == 9 && data[0] == 0:
			return checkedDateTime(DateTime{Micros: rd64(data[1:]), Kind: Naive})
		case n >= 13 && (data[0] == 1 && n == 13 || data[0] == 2 && n > 13):
			off := int32(uint32(data[9])<<24 | uint32(data[10])<<16 | uint32(data[11])<<8 | uint32(data[12]))
			d := DateTime{Micros: rd64(data[1:]), Kind: DateTimeKind(data[0]), OffsetSeconds: off}
			if d.Kind == Zone {
				if !utf8.Valid(data[13:]) || n-13 > 255 {
					return nil, unsupported("malformed datetime extension")
				}
				d.Zone = string(data[13:])
			}
			return checkedDateTime(d)
		}
		return nil, unsupported("malformed datetime extension")
	case ExtUUID:
		if len(data) != 16 {
			return nil, unsupported("UUID extension must hold 16 bytes")
		}
		return UUID(data), nil
	case ExtDecimal:
		for _, b := range data {
			if b < 0x20 || b > 0x7e {
				return nil, unsupported("malformed decimal extension")
			}
		}
		return NewDecimal(string(data))
	case ExtSet:
		if depth >= MaxDepth {
			return nil, unsupported("nested deeper than %d", MaxDepth)
		}
		inner := &decoder{r: bytes.NewReader(data)}
		inner.dec = msgpack.NewDecoder(inner.r)
		items, err := inner.value(depth + 1)
		if err != nil {
			return nil, err
		}
		list, ok := items.([]any)
		if !ok || inner.r.Len() != 0 {
			return nil, unsupported("set extension must hold an array")
		}
		return Set(list), nil
	case ExtOpaque:
		if len(data) == 0 || data[0] == 0 || len(data) < 1+int(data[0]) {
			return nil, unsupported("malformed opaque extension")
		}
		n := 1 + int(data[0])
		if !utf8.Valid(data[1:n]) {
			return nil, unsupported("opaque type is not UTF-8")
		}
		return Opaque{Type: string(data[1:n]), Data: append([]byte{}, data[n:]...)}, nil
	case -1: // MessagePack timestamp: accepted on input, read as a UTC datetime
		var secs int64
		var nanos uint32
		switch len(data) {
		case 4:
			secs = int64(uint32(data[0])<<24 | uint32(data[1])<<16 | uint32(data[2])<<8 | uint32(data[3]))
		case 8:
			x := uint64(rd64(data))
			nanos, secs = uint32(x>>34), int64(x&(1<<34-1))
		case 12:
			nanos = uint32(data[0])<<24 | uint32(data[1])<<16 | uint32(data[2])<<8 | uint32(data[3])
			secs = rd64(data[4:])
		default:
			return nil, unsupported("malformed timestamp extension")
		}
		return checkedDateTime(DateTime{Micros: secs*1_000_000 + int64(nanos/1000), Kind: Offset})
	}
	return nil, unsupported("unknown extension type %d", id)
}

func checkedDateTime(d DateTime) (any, error) {
	if d.Micros < MicrosMin || d.Micros > MicrosMax {
		return nil, unsupported("datetime out of range")
	}
	if d.Kind != Naive && (d.OffsetSeconds <= -offsetLimit || d.OffsetSeconds >= offsetLimit) {
		return nil, unsupported("datetime offset out of range")
	}
	return d, nil
}

// Decode returns the Go value of an encoding: nil, bool, int64 (uint64 above MaxInt64),
// float64, string, []byte, []any, map[string]any, *big.Int, DateTime, UUID, Decimal, Set, Opaque.
func Decode(data []byte) (any, error) {
	d := &decoder{r: bytes.NewReader(data)}
	d.dec = msgpack.NewDecoder(d.r)
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if d.r.Len() != 0 {
		return nil, unsupported("not valid MessagePack: trailing bytes")
	}
	return v, nil
}

// Canonicalize returns the canonical encoding of any valid encoding.
func Canonicalize(data []byte) ([]byte, error) {
	v, err := Decode(data)
	if err != nil {
		return nil, err
	}
	return Encode(v)
}

// ParseDateTime reads ISO 8601 "YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM[:SS]][[Zone/Name]]": without
// an offset the result is Naive; a trailing [Zone] makes a Zone datetime (its offset, when
// missing, comes from the zone database).
func ParseDateTime(s string) (DateTime, error) {
	zone := ""
	if strings.HasSuffix(s, "]") {
		i := strings.LastIndexByte(s, '[')
		if i < 0 {
			return DateTime{}, unsupported("not an ISO datetime: %q", s)
		}
		s, zone = s[:i], s[i+1:len(s)-1]
	}
	body, off, hasOff := s, 0, false
	if strings.HasSuffix(body, "Z") {
		body, hasOff = body[:len(body)-1], true
	} else if i := strings.LastIndexAny(body, "+-"); i > len("2006-01-02") {
		sign := 1
		if body[i] == '-' {
			sign = -1
		}
		parts := strings.Split(body[i+1:], ":")
		if len(parts) < 2 || len(parts) > 3 {
			return DateTime{}, unsupported("bad UTC offset in %q", s)
		}
		total := 0
		for j, p := range parts {
			var n int
			if _, err := fmt.Sscanf(p, "%02d", &n); err != nil || len(p) != 2 {
				return DateTime{}, unsupported("bad UTC offset in %q", s)
			}
			total += n * []int{3600, 60, 1}[j]
		}
		body, off, hasOff = body[:i], sign*total, true
	}
	wall, err := time.Parse("2006-01-02T15:04:05.999999999", strings.Replace(body, " ", "T", 1))
	if err != nil {
		return DateTime{}, unsupported("not an ISO datetime: %q", s)
	}
	if wall.Nanosecond()%1000 != 0 {
		return DateTime{}, unsupported("more than microsecond precision: %q", s)
	}
	w := unixMicros(wall)
	switch {
	case zone == "" && !hasOff:
		return DateTime{Micros: w, Kind: Naive}, nil
	case zone == "":
		return DateTime{Micros: w - int64(off)*1_000_000, Kind: Offset, OffsetSeconds: int32(off)}, nil
	case hasOff:
		return DateTime{Micros: w - int64(off)*1_000_000, Kind: Zone, OffsetSeconds: int32(off), Zone: zone}, nil
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return DateTime{}, unsupported("unknown time zone %q", zone)
	}
	t := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), wall.Nanosecond(), loc)
	return InZone(t), nil
}
