package agentstate

import (
	"crypto/rand"
	"fmt"
	"sync"
	"time"
)

// Time-ordered identifiers (UUIDv7 strings), strictly increasing within a process: a 48-bit
// millisecond clock, a 12-bit counter seeded randomly each millisecond, then 62 random bits (the
// same scheme as the Python and TypeScript clients and the server). Checkpoint ids order a
// thread's history, so the client fills them in with NewID; that makes every put idempotent by id.
var idState struct {
	sync.Mutex
	lastMs int64
	seq    uint16
}

// NewID returns a new UUIDv7 string, greater than every id this process made before.
func NewID() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	idState.Lock()
	ms := time.Now().UnixMilli()
	if ms <= idState.lastMs {
		idState.seq++
		if idState.seq >= 1<<12 { // counter exhausted: borrow the next millisecond
			idState.lastMs++
			idState.seq = 0
		}
		ms = idState.lastMs
	} else {
		idState.lastMs = ms
		idState.seq = uint16(r[7]) // a random start for this millisecond
		_, _ = rand.Read(r[:])
	}
	seq := idState.seq
	idState.Unlock()
	r[0] = r[0]&0x3f | 0x80 // variant 10
	var b [16]byte
	for i := 0; i < 6; i++ {
		b[i] = byte(uint64(ms) >> (40 - 8*i))
	}
	b[6] = 0x70 | byte(seq>>8)
	b[7] = byte(seq)
	copy(b[8:], r[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
