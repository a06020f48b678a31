package decodeerr

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestValue(t *testing.T) {
	_, durErr := time.ParseDuration("ten")
	_, intErr := strconv.ParseInt("ten", 10, 64)
	_, rangeErr := strconv.ParseInt("99999999999999999999", 10, 64)
	_, boolErr := strconv.ParseBool("yes please")
	for _, tc := range []struct {
		field string
		err   error
		want  string
	}{
		{"amount", intErr, `amount must be an integer, got "ten"`},
		{"amount", errors.New(`strconv.ParseInt: parsing "ten": invalid syntax`), `amount must be an integer, got "ten"`}, // as paerser words it
		{"amount", rangeErr, `amount is out of range, got "99999999999999999999"`},
		{"enable", boolErr, `enable must be true or false, got "yes please"`},
		{"graceTimeOut", durErr, `graceTimeOut must be a duration such as 10s or 1m30s (a bare number is seconds), got "ten"`},
		{"", intErr, `must be an integer, got "ten"`},
		{"amount", errors.New("field not found, node: amout"), ""},
	} {
		got, ok := Value(tc.field, tc.err)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("Value(%q, %v) = %q, %v; want %q", tc.field, tc.err, got, ok, tc.want)
		}
	}
}

func TestBlameAndFind(t *testing.T) {
	yml := "tcp:\n  routers:\n    db:\n      rule: \"HostSNI(`*`)\"\n      servce: db\n  middlewares:\n    limit:\n      inFlightConn:\n        amount: ten\n"
	toml := "[tcp.routers.db]\n  rule = \"HostSNI(`*`)\"\n  servce = \"db\"\n[tcp.middlewares.limit.inFlightConn]\n  amount = \"ten\"\n"
	for _, tc := range []struct {
		content, ext, msg, key string
		line                   int
	}{
		{yml, ".yml", "field not found, node: servce", "tcp.routers.db.servce", 5},
		{yml, ".yml", `strconv.ParseInt: parsing "ten": invalid syntax`, "tcp.middlewares.limit.inFlightConn.amount", 9},
		{toml, ".toml", "field not found, node: servce", "tcp.routers.db.servce", 3},
		{toml, ".toml", `strconv.ParseInt: parsing "ten": invalid syntax`, "tcp.middlewares.limit.inFlightConn.amount", 5},
		{yml, ".yml", "something else", "", 0},
	} {
		key, line := Blame(tc.content, tc.ext, errors.New(tc.msg))
		if key != tc.key || line != tc.line {
			t.Errorf("Blame(%s, %q) = %q line %d, want %q line %d", tc.ext, tc.msg, key, line, tc.key, tc.line)
		}
	}
	if w, l := Find(yml, ".yml", []string{"TCP", "Middlewares", "limit", "inflightconn", "amount"}); w != "tcp.middlewares.limit.inFlightConn.amount" || l != 9 {
		t.Errorf("Find yaml = %q %d", w, l)
	}
	if w, l := Find(toml, ".toml", []string{"tcp", "middlewares", "limit", "inFlightConn", "amount"}); w != "tcp.middlewares.limit.inFlightConn.amount" || l != 5 {
		t.Errorf("Find toml = %q %d", w, l)
	}
	if w, l := Find(yml, ".yml", []string{"tcp", "routers", "web"}); w != "tcp.routers" || l != 2 {
		t.Errorf("Find of a missing key = %q %d, want the deepest written prefix", w, l)
	}
}

// Blame and Find read whatever a file holds, decoded or not: they must not
// panic, and what they return must be in the content.
func FuzzBlame(f *testing.F) {
	f.Add("tcp:\n  routers:\n    db:\n      servce: db\n", ".yml", "field not found, node: servce")
	f.Add("[tcp.routers.db]\n  servce = \"db\"\n", ".toml", "field not found, node: servce")
	f.Add("[tcp.middlewares.m.inFlightConn]\namount = \"ten\"\n", ".toml", `strconv.ParseInt: parsing "ten": invalid syntax`)
	f.Add("a:\n  - b: ten\n", ".yaml", `time: invalid duration "ten"`)
	f.Fuzz(func(t *testing.T, content, ext, msg string) {
		key, line := Blame(content, ext, errors.New(msg))
		if line < 0 || line > strings.Count(content, "\n")+1 {
			t.Fatalf("line %d outside the content", line)
		}
		if line == 0 && key != "" {
			t.Fatalf("key %q without a line", key)
		}
		_, _ = Find(content, ext, strings.Split(msg, "."))
	})
}
