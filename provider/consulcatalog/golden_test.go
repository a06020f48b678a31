package consulcatalog

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/consulcatalog")

// goldenDir holds NAME.json (catalog instances and provider options in) and
// NAME.golden.json (configuration and problems out).
var goldenDir = filepath.Join("..", "..", "testdata", "consulcatalog")

type goldenInput struct {
	Comment string `json:"comment"`
	Options *struct {
		Prefix           *string  `json:"prefix"`
		ExposedByDefault *bool    `json:"exposedByDefault"`
		StrictChecks     []string `json:"strictChecks"`
		Constraints      string   `json:"constraints"`
	} `json:"options"`
	Instances []Instance `json:"instances"`
}

type goldenOutput struct {
	Configuration *config.Dynamic `json:"configuration"`
	Problems      []string        `json:"problems,omitempty"`
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.json") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var gi goldenInput
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&gi); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			opts := defaultOpts()
			if o := gi.Options; o != nil {
				if o.Prefix != nil {
					opts.Prefix = *o.Prefix
				}
				if o.ExposedByDefault != nil {
					opts.ExposedByDefault = *o.ExposedByDefault
				}
				if o.StrictChecks != nil {
					opts.StrictChecks = o.StrictChecks
				}
				if opts.Match, err = parseConstraints(o.Constraints); err != nil {
					t.Fatalf("%s: constraints: %v", in, err)
				}
			}
			conf, problems := build(gi.Instances, opts)
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(goldenOutput{conf, problems}); err != nil {
				t.Fatal(err)
			}
			got := buf.Bytes()
			golden := filepath.Join(goldenDir, name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s:\n%s", in, golden, got)
			}
		})
	}
	if n < 5 {
		t.Fatalf("found %d golden inputs in %s, want at least 5", n, goldenDir)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	return mustJSON(t, a) == mustJSON(t, b)
}
