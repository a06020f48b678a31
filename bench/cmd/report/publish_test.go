package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testEnv = `date: 2026-12-07T09:05:33Z
host: kernel 6.18.44, 2 CPUs (AMD EPYC 7B13)
GOMAXPROCS: unset (Go uses the CPU count: 2)
LIMIT=10 RATE=20 BURST=10 REPS=3 QUICK=0 peers: direct haproxy nginx tollgate
scenarios: conn-rate rr
`

const testTable = "## tollgate comparison, LIMIT=10, REPS=3, 2026-12-07\n\n```\n" + testEnv + "```\n\n" +
	"| metric | haproxy | tollgate | tollgate/haproxy |\n|---|---|---|---|\n| conn-rate: conns/s | 7410 | 7498 | 1.01× |\n\n" +
	"Each cell: median over repetitions.\n\nScenario parameters (the same for every peer):\n\n- conn-rate: -workers 16\n"

// A run publishes itself: its own results file named by date, time and
// host, a line at the top of the index, and, for a full run, the latest
// table in bench/README.md with its date and host, the rest of the README
// untouched.
func TestPublishRun(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	index := "# Runs\n\n" + runsMarker + "\n- [2026-12-06 02:37 UTC, an AMD EPYC host](2026-12-06-0237-amd-epyc.md)\n"
	readme := "# bench\n\nintro\n\n## Latest table\n\n" + latestBeginMarker + "\nold table\n" + latestEndMarker + "\n\n## After\n"
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(results, "README.md"), index)
	write(filepath.Join(dir, "README.md"), readme)

	path, err := publishRun(testTable, testEnv, results, filepath.Join(dir, "README.md"), "", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(results, "2026-12-07-0905-amd-epyc-7b13.md"); path != want {
		t.Fatalf("results file %s, want %s", path, want)
	}
	got, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(got), "# 2026-12-07 09:05 UTC, AMD EPYC 7B13\n") || !strings.Contains(string(got), "| conn-rate: conns/s | 7410 |") {
		t.Errorf("results file:\n%s", got)
	}
	idx, _ := os.ReadFile(filepath.Join(results, "README.md"))
	if want := runsMarker + "\n- [2026-12-07 09:05 UTC, AMD EPYC 7B13](2026-12-07-0905-amd-epyc-7b13.md): LIMIT=10 RATE=20 BURST=10 REPS=3 QUICK=0 peers: direct haproxy nginx tollgate\n- [2026-12-06"; !strings.Contains(string(idx), want) {
		t.Errorf("index:\n%s\nwant the new run first:\n%s", idx, want)
	}
	rd, _ := os.ReadFile(filepath.Join(dir, "README.md"))
	s := string(rd)
	for _, want := range []string{"**2026-12-07 09:05 UTC, AMD EPYC 7B13**", "(results/2026-12-07-0905-amd-epyc-7b13.md)", "| conn-rate: conns/s | 7410 | 7498 | 1.01× |", "Each cell: median", "## Latest table\n\n" + latestBeginMarker, latestEndMarker + "\n\n## After\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("bench/README.md lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "old table") || strings.Contains(s, "Scenario parameters") {
		t.Errorf("bench/README.md keeps the old table or the details:\n%s", s)
	}

	// The same run again (another run in the same minute): a file of its
	// own; a partial run leaves the README's latest table alone.
	path2, err := publishRun(strings.ReplaceAll(testTable, "7410", "1"), testEnv, results, filepath.Join(dir, "README.md"), "", false)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path2) != "2026-12-07-0905-amd-epyc-7b13-2.md" {
		t.Errorf("second file %s", path2)
	}
	if rd2, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(rd2) != s {
		t.Error("a run without -latest rewrote bench/README.md")
	}
}

func TestParseEnvModel(t *testing.T) {
	r, err := parseEnv("date: 2026-12-06T06:45:31Z\nhost: kernel 6.18.44-fc-v1147, 2 CPUs (Intel(R) Xeon(R) Processor)\n")
	if err != nil || r.model != "Intel(R) Xeon(R) Processor" || hostLabel(r.model) != "intel-xeon" {
		t.Errorf("parseEnv: %+v, %v (label %q)", r, err, hostLabel(r.model))
	}
}

func TestHostLabel(t *testing.T) {
	for in, want := range map[string]string{
		"AMD EPYC 7B13":                   "amd-epyc-7b13",
		"Intel(R) Xeon(R) CPU @ 2.20GHz":  "intel-xeon",
		"":                                "host",
		"AMD EPYC 7763 64-Core Processor": "amd-epyc-7763",
	} {
		if got := hostLabel(in); got != want {
			t.Errorf("hostLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
