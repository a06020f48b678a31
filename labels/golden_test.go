package labels

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/labels")

// goldenDir holds NAME.labels (one key=value per line, split on the first
// "=", blank lines and lines starting with # ignored) and NAME.golden.json.
var goldenDir = filepath.Join("..", "testdata", "labels")

// goldenResult is what a golden file records for one label set. ServerPorts
// shows the label ports, which config.TCPServer keeps out of JSON.
type goldenResult struct {
	Config      *config.Dynamic     `json:"config,omitempty"`
	ServerPorts map[string][]string `json:"serverPorts,omitempty"`
	Error       string              `json:"error,omitempty"`
	ErrorKey    string              `json:"errorKey,omitempty"`
	Knobs       *Knobs              `json:"knobs,omitempty"`
	KnobsError  string              `json:"knobsError,omitempty"`
}

func decodeForGolden(m map[string]string) goldenResult {
	var res goldenResult
	conf, err := Decode(m)
	if err != nil {
		res.Error = err.Error()
		var le *Error
		if errors.As(err, &le) {
			res.ErrorKey = le.Key
		}
	} else {
		res.Config = conf
		if conf.TCP != nil {
			for name, svc := range conf.TCP.Services {
				if svc == nil || svc.LoadBalancer == nil {
					continue
				}
				for _, s := range svc.LoadBalancer.Servers {
					if res.ServerPorts == nil {
						res.ServerPorts = map[string][]string{}
					}
					res.ServerPorts[name] = append(res.ServerPorts[name], s.Port)
				}
			}
		}
	}
	k, err := DecodeKnobs(m)
	if err != nil {
		res.KnobsError = err.Error()
	} else if !reflect.DeepEqual(k, Knobs{}) {
		res.Knobs = &k
	}
	return res
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(goldenDir, "*.labels"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatalf("no *.labels files in %s", goldenDir)
	}
	sort.Strings(inputs)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".labels")
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(decodeForGolden(itest.ReadLabels(t, in)), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			goldenPath := filepath.Join(goldenDir, name+".golden.json")
			if *update {
				if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatalf("%v (run go test ./labels -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the decoded labels (rerun with -update if intended):\n--- got\n%s\n--- want\n%s", goldenPath, got, want)
			}
		})
	}
}

// TestGoldenErrorsNameTheLabel pins the property the golden files show: every
// bad-* input fails with an *Error whose key is one of the input labels.
func TestGoldenErrorsNameTheLabel(t *testing.T) {
	inputs, _ := filepath.Glob(filepath.Join(goldenDir, "bad-*.labels"))
	if len(inputs) == 0 {
		t.Fatal("no bad-*.labels inputs")
	}
	for _, in := range inputs {
		m := itest.ReadLabels(t, in)
		_, err := Decode(m)
		if err == nil {
			_, err = DecodeKnobs(m)
		}
		var le *Error
		if !errors.As(err, &le) {
			t.Errorf("%s: error %v is not a *labels.Error", in, err)
			continue
		}
		if v, ok := m[le.Key]; !ok || v != le.Value {
			t.Errorf("%s: error names label %q=%q, which is not in the input", in, le.Key, le.Value)
		}
		if !strings.Contains(err.Error(), le.Key) {
			t.Errorf("%s: message %q does not contain the key %q", in, err, le.Key)
		}
	}
}
