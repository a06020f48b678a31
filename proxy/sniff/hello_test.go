package sniff

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func TestReadHello(t *testing.T) {
	hi := itest.ClientHello(t, &tls.Config{ServerName: "Db.Example.COM", NextProtos: []string{"h2", "postgresql"}})
	small := itest.Reframe(hi, 50)
	after := []byte("early bytes the client sent behind its hello")
	for _, tc := range []struct {
		name  string
		prior []byte
		src   io.Reader
		want  []byte // peeked
	}{
		{"one read", nil, bytes.NewReader(hi), hi},
		{"one byte per read", nil, iotest.OneByteReader(bytes.NewReader(hi)), hi},
		{"50-byte records, 3 bytes per read", nil, iotest.HalfReader(iotest.OneByteReader(bytes.NewReader(small))), small},
		{"records split by reads", nil, &chunkReader{r: bytes.NewReader(small), n: 7}, small},
		{"bytes after a PROXY header", hi[:9], bytes.NewReader(hi[9:]), hi},
		{"all bytes already peeked", slices.Clone(hi), bytes.NewReader(nil), hi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ReadHello(tc.src, tc.prior, MaxHelloBytes)
			if err != nil {
				t.Fatal(err)
			}
			if !h.TLS || h.SNI != "db.example.com" || !slices.Equal(h.ALPN, []string{"h2", "postgresql"}) {
				t.Fatalf("got tls=%v sni=%q alpn=%q", h.TLS, h.SNI, h.ALPN)
			}
			if !bytes.Equal(h.Peeked, tc.want) {
				t.Fatalf("peeked %d bytes, want exactly the %d-byte hello", len(h.Peeked), len(tc.want))
			}
		})
	}
	t.Run("bytes behind the hello are kept", func(t *testing.T) {
		in := append(slices.Clone(hi), after...)
		h, err := ReadHello(bytes.NewReader(in), nil, MaxHelloBytes)
		if err != nil || h.SNI != "db.example.com" {
			t.Fatalf("sni %q, err %v", h.SNI, err)
		}
		if !bytes.HasPrefix(in, h.Peeked) || len(h.Peeked) < len(hi) {
			t.Fatalf("peeked %d bytes that are not a prefix of the input covering the hello", len(h.Peeked))
		}
	})
	t.Run("plain TCP", func(t *testing.T) {
		h, err := ReadHello(iotest.OneByteReader(strings.NewReader("GET / HTTP/1.0\r\n")), nil, MaxHelloBytes)
		if err != nil || h.TLS || h.SNI != "" || string(h.Peeked) != "G" {
			t.Fatalf("got %+v, %v: want plain with exactly the one byte read", h, err)
		}
	})
	t.Run("no SNI", func(t *testing.T) {
		h, err := ReadHello(bytes.NewReader(itest.ClientHello(t, &tls.Config{InsecureSkipVerify: true})), nil, MaxHelloBytes)
		if err != nil || !h.TLS || h.SNI != "" {
			t.Fatalf("got %+v, %v", h, err)
		}
	})
	for _, tc := range []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"truncated", hi[:len(hi)-1], MaxHelloBytes, io.ErrUnexpectedEOF},
		{"empty", nil, MaxHelloBytes, io.EOF},
		{"over the cap", hi, len(hi) - 1, ErrHelloTooLarge},
		{"not a hello", append([]byte{0x16, 3, 1, 0, 4}, 2, 0, 0, 0), MaxHelloBytes, nil},
		{"garbage record", append([]byte{0x16, 3, 1, 0, 10}, "0123456789"...), MaxHelloBytes, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ReadHello(bytes.NewReader(tc.in), nil, tc.max)
			if err == nil {
				t.Fatalf("got %+v and no error", h)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if len(h.Peeked) > tc.max || !bytes.HasPrefix(tc.in, h.Peeked) {
				t.Fatalf("peeked %d bytes: not a prefix of the input within the cap", len(h.Peeked))
			}
		})
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// The SNI maps give the same answer as trying every TLS route in order.

// FuzzPeekHello feeds arbitrary first bytes to the ClientHello reader, whole
// and in chunks of every size. It must not panic, must read only a prefix of
// its input within the cap, must agree with itself however the bytes are
// split, and must only report lower-case ASCII server names.
func FuzzPeekHello(f *testing.F) {
	for i, s := range itest.HelloSeeds(f) {
		f.Add(s, uint8(i%13+1))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		whole, errWhole := ReadHello(bytes.NewReader(data), nil, MaxHelloBytes)
		n := int(chunk)%64 + 1
		split, errSplit := ReadHello(&chunkReader{r: bytes.NewReader(data), n: n}, nil, MaxHelloBytes)
		k := min(int(chunk)%8, len(data))
		prior, errPrior := ReadHello(bytes.NewReader(data[k:]), slices.Clone(data[:k]), MaxHelloBytes)

		for _, h := range []Hello{whole, split, prior} {
			if len(h.Peeked) > MaxHelloBytes {
				t.Fatalf("peeked %d bytes, over the %d cap", len(h.Peeked), MaxHelloBytes)
			}
			if !bytes.HasPrefix(data, h.Peeked) {
				t.Fatalf("peeked bytes are not a prefix of the input")
			}
		}
		if (errWhole == nil) != (errSplit == nil) || (errWhole == nil) != (errPrior == nil) {
			t.Fatalf("whole: %v, %d-byte chunks: %v, %d bytes prior: %v", errWhole, n, errSplit, k, errPrior)
		}
		if errWhole != nil {
			return
		}
		for _, h := range []Hello{split, prior} {
			if h.TLS != whole.TLS || h.SNI != whole.SNI || !slices.Equal(h.ALPN, whole.ALPN) {
				t.Fatalf("split reads gave %q %q, whole gave %q %q", h.SNI, h.ALPN, whole.SNI, whole.ALPN)
			}
		}
		if whole.TLS != (data[0] == RecordTypeHandshake) {
			t.Fatalf("tls=%v for first byte %#x", whole.TLS, data[0])
		}
		if !IsASCII(whole.SNI) || whole.SNI != strings.ToLower(whole.SNI) || strings.HasSuffix(whole.SNI, ".") {
			t.Fatalf("server name %q is not lower-case ASCII without a trailing dot", whole.SNI)
		}
		if !whole.TLS && (whole.SNI != "" || len(whole.Peeked) == 0) {
			t.Fatalf("plain client: sni %q, %d bytes peeked", whole.SNI, len(whole.Peeked))
		}
	})
}

// go test ./proxy/sniff -run TestWriteFuzzSeeds -update-fuzz-seeds rewrites
// the seed corpus under testdata/fuzz from real tls.Client hellos.
var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite testdata/fuzz seed corpora")

func TestWriteFuzzSeeds(t *testing.T) {
	if !*updateFuzzSeeds {
		t.Skip("run with -update-fuzz-seeds to rewrite testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzPeekHello")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range itest.HelloSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint8(%d)\n", s, len(s)%13+1)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
