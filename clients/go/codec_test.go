package agentstate

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type goldenFile struct {
	Values []struct {
		Name     string            `json:"name"`
		Value    []json.RawMessage `json:"value"`
		Encoding string            `json:"encoding"`
		Length   int               `json:"encoding_length"`
	} `json:"values"`
	Canonicalize []struct {
		Name      string `json:"name"`
		Input     string `json:"input"`
		Canonical string `json:"canonical"`
	} `json:"canonicalize"`
}

func loadGolden(t *testing.T) goldenFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "tests", "golden", "values.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenRoundTrip(t *testing.T) {
	g := loadGolden(t)
	n := 0
	for _, v := range g.Values {
		if v.Encoding == "" {
			continue
		}
		got, err := Canonicalize(unhex(t, v.Encoding))
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		if hex.EncodeToString(got) != v.Encoding {
			t.Errorf("%s: got %x want %s", v.Name, got, v.Encoding)
		}
		n++
	}
	if n < 150 {
		t.Fatalf("only %d golden values", n)
	}
}

func TestGoldenLarge(t *testing.T) {
	g := loadGolden(t)
	n := 0
	for _, v := range g.Values {
		if v.Encoding != "" {
			continue
		}
		var kind string
		_ = json.Unmarshal(v.Value[0], &kind)
		var val any
		switch kind {
		case "strx":
			var unit string
			var count int
			_ = json.Unmarshal(v.Value[1], &unit)
			_ = json.Unmarshal(v.Value[2], &count)
			val = strings.Repeat(unit, count)
		case "bytesx":
			var h string
			var count int
			_ = json.Unmarshal(v.Value[1], &h)
			_ = json.Unmarshal(v.Value[2], &count)
			val = []byte(strings.Repeat(string(unhex(t, h)), count))
		case "listx":
			var count int
			_ = json.Unmarshal(v.Value[2], &count)
			val = make([]any, count)
		case "opaquex":
			var typ, h string
			var count int
			_ = json.Unmarshal(v.Value[1], &typ)
			_ = json.Unmarshal(v.Value[2], &h)
			_ = json.Unmarshal(v.Value[3], &count)
			val = Opaque{Type: typ, Data: []byte(strings.Repeat(string(unhex(t, h)), count))}
		default:
			t.Fatalf("unknown description %s", kind)
		}
		b, err := Encode(val)
		if err != nil || len(b) != v.Length {
			t.Errorf("%s: len %d err %v, want %d", v.Name, len(b), err, v.Length)
		}
		again, err := Canonicalize(b)
		if err != nil || string(again) != string(b) {
			t.Errorf("%s: round trip changed the bytes (%v)", v.Name, err)
		}
		n++
	}
	if n < 4 {
		t.Fatalf("only %d large values", n)
	}
}

func TestGoldenCanonicalize(t *testing.T) {
	g := loadGolden(t)
	for _, c := range g.Canonicalize {
		if c.Canonical == "" {
			continue
		}
		got, err := Canonicalize(unhex(t, c.Input))
		if err != nil || hex.EncodeToString(got) != c.Canonical {
			t.Errorf("%s: got %x (%v) want %s", c.Name, got, err, c.Canonical)
		}
	}
}

func TestGoldenDescriptions(t *testing.T) {
	g := loadGolden(t)
	n := 0
	for _, v := range g.Values {
		if v.Encoding == "" {
			continue
		}
		var kind, arg string
		_ = json.Unmarshal(v.Value[0], &kind)
		if len(v.Value) > 1 {
			_ = json.Unmarshal(v.Value[1], &arg)
		}
		var val any
		switch kind {
		case "none":
			val = nil
		case "str":
			val = arg
		case "bytes":
			val = unhex(t, arg)
		case "int":
			b, _ := new(big.Int).SetString(arg, 10)
			val = b
		case "float":
			switch arg {
			case "inf":
				val = math.Inf(1)
			case "-inf":
				val = math.Inf(-1)
			case "nan":
				val = math.NaN()
			default:
				var f float64
				_ = json.Unmarshal([]byte(arg), &f)
				if arg == "-0.0" {
					f = math.Copysign(0, -1)
				}
				val = f
			}
		case "uuid":
			u, err := ParseUUID(arg)
			if err != nil {
				t.Fatal(err)
			}
			val = u
		case "decimal":
			d, err := NewDecimal(arg)
			if err != nil {
				t.Fatal(err)
			}
			val = d
		default:
			continue
		}
		got, err := Encode(val)
		if err != nil || hex.EncodeToString(got) != v.Encoding {
			t.Errorf("%s: got %x (%v) want %s", v.Name, got, err, v.Encoding)
		}
		n++
	}
	if n < 40 {
		t.Fatalf("only %d described values checked", n)
	}
}

func TestGoRepresentations(t *testing.T) {
	enc := func(v any) string { return hex.EncodeToString(MustEncode(v)) }
	cases := map[string]string{
		enc(1):                                   "01",
		enc(uint64(math.MaxUint64)):              "cfffffffffffffffff",
		enc(float32(1.5)):                        "cb3ff8000000000000",
		enc(math.NaN()):                          "cb7ff8000000000000",
		enc(new(big.Int).Lsh(big.NewInt(1), 64)): "c70901010000000000000000",
		enc(map[string]int{"b": 1, "a": 2}):      "82a16102a16201",
		enc([]string{"x"}):                       "91a178",
		enc(Set{3, 1, 2, 1}):                     "d60593010203",
		enc(map[string]any{"\U0001F600": 1, "\uFF61": 2}): "82a3efbda102a4f09f988001",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %s want %s", got, want)
		}
	}
	v, _ := Decode(MustEncode(uint64(math.MaxUint64)))
	if v != uint64(math.MaxUint64) {
		t.Errorf("uint64 max read back as %T %v", v, v)
	}
	v, _ = Decode(MustEncode(7))
	if v != int64(7) {
		t.Errorf("7 read back as %T", v)
	}
	// time.Time: nanoseconds truncated to microseconds, offset kept.
	tm := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.FixedZone("", 19800))
	v, _ = Decode(MustEncode(tm))
	dt := v.(DateTime)
	if dt.String() != "2024-05-01T12:00:00.123456+05:30" || !dt.Time().Equal(tm.Truncate(time.Microsecond)) {
		t.Errorf("time read back as %v", dt)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err == nil {
		z := InZone(time.Date(2024, 7, 14, 10, 0, 0, 0, paris))
		if hex.EncodeToString(MustEncode(z)) != "c719020200061d307fcc600000001c204575726f70652f5061726973" {
			t.Errorf("zoned datetime %x", MustEncode(z))
		}
	}
	if NaiveTime(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)).String() != "0001-01-01T00:00:00" {
		t.Error("naive min")
	}
}

func TestDecimalCanonical(t *testing.T) {
	cases := [][2]string{
		{"1.10", "1.10"}, {"1.1e0", "1.1"}, {"1E+3", "1E+3"}, {"0.0000001", "1E-7"}, {"-0", "-0"},
		{"0.0000000", "0E-7"}, {"123.456e-2", "1.23456"}, {"nan", "NaN"}, {"-Inf", "-Infinity"},
		{"sNaN0012", "sNaN12"}, {" 42 ", "42"}, {"00012.50", "12.50"}, {".5", "0.5"}, {"5.", "5"},
	}
	for _, c := range cases {
		got, err := CanonicalDecimal(c[0])
		if err != nil || got != c[1] {
			t.Errorf("%q: got %q (%v) want %q", c[0], got, err, c[1])
		}
	}
	if _, err := CanonicalDecimal("1.2.3"); err == nil {
		t.Error("1.2.3 accepted")
	}
}

func TestUnsupported(t *testing.T) {
	check := func(v any, path string) {
		t.Helper()
		_, err := Encode(v)
		var u *UnsupportedValueError
		if !errors.As(err, &u) || u.Path != path {
			t.Errorf("%v: got %v, want path %s", v, err, path)
		}
	}
	check(map[string]any{"a": []any{1, struct{}{}}}, `$['a'][1]`)
	check(map[string]any{"s": "\xff"}, `$['s']`)
	check(map[int]int{1: 2}, "$")
	check(Opaque{}, "$")
	var deep any = 1
	for i := 0; i < 65; i++ {
		deep = []any{deep}
	}
	check(deep, "$"+strings.Repeat("[0]", 64))
	for _, h := range []string{"c1", "9201", "c70006", "8101 01", "d40700"} {
		if _, err := Decode(unhex(t, strings.ReplaceAll(h, " ", ""))); err == nil {
			t.Errorf("%s decoded", h)
		}
	}
}
