package upgrade

import (
	"reflect"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	old := []Listener{
		{Name: "db", Address: ":5432", FD: 3},
		{Name: "traefik", Address: ":8080", FD: 4},
		{Name: "api.address", Address: "127.0.0.1:9000", FD: 5},
		{Name: "mq", Address: ":5672", FD: 6},
	}
	for _, tc := range []struct {
		name string
		want map[string]string
		got  map[string]int // name -> FD
	}{
		{"kept as they were", map[string]string{"db": ":5432", "traefik": ":8080", "api.address": "127.0.0.1:9000"},
			map[string]int{"db": 3, "traefik": 4, "api.address": 5}},
		{"renamed", map[string]string{"postgres": ":5432", "mq": ":5672"},
			map[string]int{"postgres": 3, "mq": 6}},
		{"an entry point become internal", map[string]string{"ping.entryPoint": ":8080", "db": ":5432"},
			map[string]int{"ping.entryPoint": 4, "db": 3}},
		{"an admin listener become an entry point", map[string]string{"admin": "127.0.0.1:9000"},
			map[string]int{"admin": 5}},
		{"moved: same name, another address", map[string]string{"db": ":5433", "mq": ":5432"},
			map[string]int{"mq": 3}},
		{"the name's own socket first", map[string]string{"a": ":5432", "db": ":5432"},
			map[string]int{"db": 3}},
		{"nothing inherited matches", map[string]string{"x": ":1"}, map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]int{}
			for name, l := range Match(old, tc.want, nil) {
				got[name] = l.FD
				if l.Address != tc.want[name] {
					t.Errorf("%s took %+v, configured at %s", name, l, tc.want[name])
				}
			}
			if !reflect.DeepEqual(got, tc.got) {
				t.Errorf("Match = %v, want %v", got, tc.got)
			}
		})
	}
}

// The key decides which addresses are one: with a key that reads "localhost"
// as 127.0.0.1 (what proxy.ListenKey does), an entry point respelled from
// 127.0.0.1:5432 to localhost:5432 keeps its socket, under its own name
// first and under another's next; without it, the spellings differ.
func TestMatchComparesAddressesByKey(t *testing.T) {
	old := []Listener{
		{Name: "db", Address: "127.0.0.1:5432", FD: 3},
		{Name: "mq", Address: "127.0.0.1:5672", FD: 4},
	}
	key := func(addr string) string { return strings.Replace(addr, "localhost", "127.0.0.1", 1) }
	want := map[string]string{"db": "localhost:5432", "amqp": "localhost:5672"}
	got := map[string]int{}
	for name, l := range Match(old, want, key) {
		got[name] = l.FD
	}
	if w := map[string]int{"db": 3, "amqp": 4}; !reflect.DeepEqual(got, w) {
		t.Errorf("Match with a key = %v, want %v", got, w)
	}
	if got := Match(old, want, nil); len(got) != 0 {
		t.Errorf("Match without a key = %v, want nothing (the spellings differ)", got)
	}
}
