package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/check"
	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/file"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// BenchmarkApplyFile is what a file of N routers (each with its own service
// and inFlightConn) costs from its bytes to the compiled tables, stage by
// stage: the file provider's Load (read, render, decode), the watcher's
// Merge, and the proxy's Compile on a State that already holds the
// previous generation (as a reload does). docs/performance.md, "Large
// configurations", quotes it.
//
//	go test -run XXX -bench ApplyFile -benchtime 3x ./e2e/
func BenchmarkApplyFile(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("routers=%d", n)
			if shared {
				name += "/one-service"
			}
			b.Run(name, func(b *testing.B) { benchApply(b, n, shared) })
		}
	}
}

func benchApply(b *testing.B, n int, shared bool) {
	dir := b.TempDir()
	itest.WriteFleet(b, dir, "fleet.yml", itest.Fleet{N: n, EntryPoint: "tcp", Backend: "127.0.0.1:9", Shared: shared})
	p, err := file.New(&config.FileProvider{Filename: filepath.Join(dir, "fleet.yml")}, provider.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st := proxy.NewState(zerolog.Nop(), proxy.StateOptions{})
	var load, merge, compile time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		m := p.Load()
		if m.Err != nil {
			b.Fatal(m.Err)
		}
		t1 := time.Now()
		cfg := provider.Merge(map[string]*config.Dynamic{file.Name: m.Configuration})
		t2 := time.Now()
		tables, _ := proxy.Compile(cfg, []string{"tcp"}, st, zerolog.Nop())
		t3 := time.Now()
		if tables["tcp"] == nil {
			b.Fatal("no table")
		}
		load, merge, compile = load+t1.Sub(t0), merge+t2.Sub(t1), compile+t3.Sub(t2)
	}
	b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load-ms/op")
	b.ReportMetric(float64(merge.Milliseconds())/float64(b.N), "merge-ms/op")
	b.ReportMetric(float64(compile.Milliseconds())/float64(b.N), "compile-ms/op")
}

// BenchmarkCheckFile is `tollgate check` of the same files.
func BenchmarkCheckFile(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("routers=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			itest.WriteFleet(b, dir, "fleet.yml", itest.Fleet{N: n, EntryPoint: "tcp", Backend: "127.0.0.1:9"})
			path := filepath.Join(dir, "fleet.yml")
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if r := check.Files([]string{path}, check.DefaultOptions()); r.Failed() {
					b.Fatalf("check failed: %+v", r.Problems[:min(3, len(r.Problems))])
				}
			}
		})
	}
}
