package itest

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// ReadLabels reads a .labels fixture: one key=value per line, split on the
// first "=", blank lines and lines starting with # skipped. A line without
// "=" fails t.
func ReadLabels(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q has no '='", path, line)
		}
		m[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}
