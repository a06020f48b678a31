package sniff

import (
	"bytes"
	"testing"
)

// FuzzPostgresPreamble: pgPreamble never panics, and says PGSSL or
// PGGSSENC exactly for an input starting with the 8 request bytes, PGMore
// exactly for a proper prefix of them.
func FuzzPostgresPreamble(f *testing.F) {
	f.Add(SSLRequest)
	f.Add(GSSENCRequest)
	f.Add(SSLRequest[:3])
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47, 0x16, 3, 1})
	f.Add([]byte{0, 0, 0, 9})
	f.Add([]byte{0x16, 3, 1, 0, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		k := PGStart(b)
		startsWith := func(req []byte) bool { return len(b) >= 8 && bytes.Equal(b[:8], req) }
		prefixOf := func(req []byte) bool { return len(b) < 8 && bytes.Equal(b, req[:len(b)]) }
		switch {
		case startsWith(SSLRequest) != (k == PGSSL):
			t.Fatalf("%x: %d", b, k)
		case startsWith(GSSENCRequest) != (k == PGGSSENC):
			t.Fatalf("%x: %d", b, k)
		case (prefixOf(SSLRequest) || prefixOf(GSSENCRequest)) != (k == PGMore):
			t.Fatalf("%x: %d", b, k)
		}
	})
}
