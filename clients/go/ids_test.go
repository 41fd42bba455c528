package agentstate

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewIDIsUUIDv7AndStrictlyIncreasing(t *testing.T) {
	before := time.Now().UnixMilli()
	prev := ""
	for i := 0; i < 20000; i++ {
		id := NewID()
		if !uuidV7.MatchString(id) {
			t.Fatalf("not a UUIDv7: %q", id)
		}
		if id <= prev {
			t.Fatalf("ids not increasing: %q after %q", id, prev)
		}
		prev = id
	}
	ms, err := strconv.ParseInt(strings.ReplaceAll(prev, "-", "")[:12], 16, 64)
	if err != nil || ms < before || ms > before+60_000 {
		t.Fatalf("clock part %d not near %d (%v)", ms, before, err)
	}
}
