package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// A crowdSec block's API key is never in its JSON (the API, check's
// report), through the block or the middleware that holds it, by value or
// by pointer; the block itself keeps it, and a block without one shows none.
func TestCrowdSecKeyRedacted(t *testing.T) {
	cs := &TCPCrowdSec{LapiURL: "http://127.0.0.1:8080", APIKey: "s3cret-key"}
	mw := map[string]*TCPMiddleware{"cs": {CrowdSec: cs}}
	for _, v := range []any{cs, *cs, mw, TCPMiddleware{CrowdSec: cs}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "s3cret") || !strings.Contains(string(b), `"apiKey":"REDACTED"`) || !strings.Contains(string(b), `"lapiURL":"http://127.0.0.1:8080"`) {
			t.Errorf("%T shown as %s", v, b)
		}
	}
	if cs.APIKey != "s3cret-key" {
		t.Errorf("the block's key became %q", cs.APIKey)
	}
	b, _ := json.Marshal(TCPCrowdSec{APIKeyFile: "/run/key"})
	if strings.Contains(string(b), "apiKey\"") || !strings.Contains(string(b), `"apiKeyFile":"/run/key"`) {
		t.Errorf("a block without a key shown as %s", b)
	}
}
