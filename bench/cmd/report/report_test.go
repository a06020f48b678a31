package main

import "testing"

func TestCell(t *testing.T) {
	r := row{"conn-rate", "conns_per_s", "", "%.0f"}
	for _, tc := range []struct {
		samples []any
		n       int
		want    string
	}{
		{nil, 3, "n/a"},
		{[]any{1000.0, 900.0, 1100.0}, 3, "1000 [900–1100]"},
		{[]any{1000.0, 1000.0}, 2, "1000"},
		{[]any{1000.0, 1200.0}, 3, "1100 [1000–1200] (n=2)"},
		{[]any{true, true}, 2, "PASS"},
		{[]any{true, false, true}, 3, "**FAIL** (2/3 pass)"},
		{[]any{false}, 1, "**FAIL**"},
	} {
		if got := cell(r, tc.samples, tc.n); got != tc.want {
			t.Errorf("cell(%v) = %q, want %q", tc.samples, got, tc.want)
		}
	}
	rel := row{"limit-exact", "release_all_ms", "", "%.2f"}
	if got := cell(rel, []any{3.0, -1.0, 4.0}, 3); got != "never" {
		t.Errorf("a repetition that never freed its slots: got %q, want never", got)
	}
}

func TestTableRowsNewScenario(t *testing.T) {
	values := map[string]map[string]map[string][]any{
		"new-scenario": {"tollgate": {"handshakes_per_s": {10.0}, "note": {"x"}, "pass": {true}}},
	}
	var got []string
	for _, r := range tableRows([]string{"new-scenario"}, values) {
		if r.scenario == "new-scenario" {
			got = append(got, r.metric)
		}
	}
	if len(got) != 2 || got[0] != "handshakes_per_s" || got[1] != "pass" {
		t.Errorf("rows of an unlisted scenario: %v, want its numeric and bool metrics", got)
	}
}

func TestRatioCell(t *testing.T) {
	for _, tc := range []struct {
		a, b map[int]float64
		want string
	}{
		{nil, nil, "0.97×"},
		{map[int]float64{1: 97}, map[int]float64{1: 100}, "0.97×"},                                    // one pair: no range
		{map[int]float64{1: 90, 2: 110}, map[int]float64{1: 100, 2: 100}, "0.97× [0.90–1.10]"},        // per repetition
		{map[int]float64{1: 90, 2: 110, 3: 99}, map[int]float64{1: 100, 3: 100}, "0.97× [0.90–0.99]"}, // repetition 2 has no pair
		{map[int]float64{1: 97, 2: 194}, map[int]float64{1: 100, 2: 200}, "0.97×"},                    // the same ratio each time
		{map[int]float64{1: 90, 2: 110}, map[int]float64{1: 0, 2: 100}, "0.97×"},                      // a zero divides nothing
	} {
		if got := ratioCell(0.97, tc.a, tc.b); got != tc.want {
			t.Errorf("ratioCell(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}
