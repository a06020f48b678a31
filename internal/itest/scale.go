package itest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Fleet describes a generated dynamic file of many routers, the shape the
// scale tests and benchmarks measure (docs/performance.md, "Large
// configurations"): N routers on EntryPoint, router i named r<i> with rule
// HostSNI(`*`) and priority i+1, so the last router is the one that takes
// a connection.
type Fleet struct {
	N          int
	EntryPoint string
	// Backend is the address of every server; Last, when set, is the last
	// router's (so a test sees when the file is live).
	Backend, Last string
	// Shared: every router uses one service and no middleware (the
	// routers-only variant); otherwise each has its own service and
	// inFlightConn middleware.
	Shared bool
	// TOML writes the file as TOML instead of YAML.
	TOML bool
}

// Write writes the fleet's dynamic file to w.
func (f Fleet) Write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	last := f.Last
	if last == "" {
		last = f.Backend
	}
	svc := func(i int) string {
		if f.Shared {
			return "shared"
		}
		return fmt.Sprintf("s%d", i)
	}
	if f.TOML {
		for i := 0; i < f.N; i++ {
			fmt.Fprintf(bw, "[tcp.routers.r%d]\nentryPoints = [%q]\nrule = \"HostSNI(`*`)\"\nservice = %q\npriority = %d\n", i, f.EntryPoint, svc(i), i+1)
			if !f.Shared {
				fmt.Fprintf(bw, "middlewares = [\"m%d\"]\n", i)
			}
		}
		for i := 0; i < f.N; i++ {
			if f.Shared && i > 0 {
				break
			}
			addr := f.Backend
			if i == f.N-1 || f.Shared {
				addr = last
			}
			fmt.Fprintf(bw, "[[tcp.services.%s.loadBalancer.servers]]\naddress = %q\n", svc(i), addr)
			if !f.Shared {
				fmt.Fprintf(bw, "[tcp.middlewares.m%d.inFlightConn]\namount = 10\n", i)
			}
		}
		return bw.Flush()
	}
	bw.WriteString("tcp:\n  routers:\n")
	for i := 0; i < f.N; i++ {
		fmt.Fprintf(bw, "    r%d:\n      entryPoints: [%s]\n      rule: \"HostSNI(`*`)\"\n      service: %s\n      priority: %d\n", i, f.EntryPoint, svc(i), i+1)
		if !f.Shared {
			fmt.Fprintf(bw, "      middlewares: [m%d]\n", i)
		}
	}
	bw.WriteString("  services:\n")
	for i := 0; i < f.N; i++ {
		if f.Shared && i > 0 {
			break
		}
		addr := f.Backend
		if i == f.N-1 || f.Shared {
			addr = last
		}
		fmt.Fprintf(bw, "    %s:\n      loadBalancer:\n        servers:\n          - address: %q\n", svc(i), addr)
	}
	if !f.Shared {
		bw.WriteString("  middlewares:\n")
		for i := 0; i < f.N; i++ {
			fmt.Fprintf(bw, "    m%d:\n      inFlightConn:\n        amount: 10\n", i)
		}
	}
	return bw.Flush()
}

// Bytes returns the fleet's dynamic file.
func (f Fleet) Bytes() []byte {
	var b bytesWriter
	_ = f.Write(&b)
	return b
}

type bytesWriter []byte

func (b *bytesWriter) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// WriteFleet writes f as name in dir through a temporary file renamed into
// place (an atomic write, as editors and ConfigMaps do) and returns the
// file's size.
func WriteFleet(t testing.TB, dir, name string, f Fleet) int64 {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	fh, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(fh); err != nil {
		t.Fatal(err)
	}
	fi, err := fh.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
