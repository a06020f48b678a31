package check

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// writeReport writes the bytes json.Encoder (indented, HTML not escaped)
// writes, for every report of the golden inputs, a generated fleet, an
// empty report and one with TLS and problems.
func TestWriteReportMatchesEncoder(t *testing.T) {
	var reps []*Report
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			reps = append(reps, Files([]string{filepath.Join(goldenDir, e.Name())}, DefaultOptions()))
		}
	}
	dir := t.TempDir()
	itest.WriteFleet(t, dir, "fleet.yml", itest.Fleet{N: 50, EntryPoint: "tcp", Backend: "127.0.0.1:9"})
	reps = append(reps, Files([]string{filepath.Join(dir, "fleet.yml")}, DefaultOptions()), &Report{},
		&Report{TCP: &config.TCPConfiguration{TLS: &config.TLSConfiguration{Options: map[string]config.TLSOptions{"default": {}}},
			Routers: map[string]*config.TCPRouter{"a<b>&": nil, "": {Rule: "HostSNI(`<x>`)"}}},
			Problems: []Problem{{File: "f", Message: "m"}}})
	for i, rep := range reps {
		var want, got bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			t.Fatal(err)
		}
		if err := writeReport(&got, rep); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("report %d: writeReport differs from json.Encoder:\n got: %.3000s\nwant: %.3000s", i, got.String(), want.String())
		}
	}
	if len(reps) < 10 {
		t.Fatalf("only %d reports compared", len(reps))
	}
}

// chunks records each Write.
type chunks [][]byte

func (c *chunks) Write(p []byte) (int, error) {
	*c = append(*c, append([]byte(nil), p...))
	return len(p), nil
}

// A private key is never cut between two Writes (Run's redacting writer
// finds one only within a Write), however far into the report it is.
func TestWriteReportKeepsKeysWhole(t *testing.T) {
	dir := t.TempDir()
	itest.WriteFleet(t, dir, "fleet.yml", itest.Fleet{N: 2000, EntryPoint: "tcp", Backend: "127.0.0.1:9"})
	rep := Files([]string{filepath.Join(dir, "fleet.yml")}, DefaultOptions())
	key := "-----BEGIN PRIVATE KEY-----\n" + strings.Repeat("QUJD", 20000) + "\n-----END PRIVATE KEY-----\n"
	rep.TCP.TLS = &config.TLSConfiguration{Certificates: []*config.CertAndStores{{Certificate: config.Certificate{KeyFile: config.FileOrContent(key)}}}}
	var c chunks
	if err := writeReport(&c, rep); err != nil {
		t.Fatal(err)
	}
	if len(c) < 3 {
		t.Fatalf("%d writes: the report was not streamed", len(c))
	}
	found := false
	for _, p := range c {
		b, e := bytes.Count(p, []byte("BEGIN PRIVATE KEY")), bytes.Count(p, []byte("END PRIVATE KEY"))
		if b != e {
			t.Fatalf("a write cuts a private key (%d BEGIN, %d END)", b, e)
		}
		found = found || b > 0
	}
	if !found {
		t.Fatal("the key is not in the report")
	}
}
