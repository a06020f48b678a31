package acme

import (
	"encoding/json"
	"testing"
)

// An authorization keeps its http-01 challenge alone; every other answer
// passes unchanged.
func TestKeepHTTP01(t *testing.T) {
	authz := `{"status":"pending","identifier":{"type":"dns","value":"db.example"},"challenges":[` +
		`{"type":"tls-alpn-01","url":"https://ca/c/1","token":"t1","status":"pending"},` +
		`{"type":"http-01","url":"https://ca/c/2","token":"t2","status":"pending"},` +
		`{"type":"dns-01","url":"https://ca/c/3","token":"t3","status":"pending"}]}`
	var got struct {
		Status     string
		Identifier struct{ Value string }
		Challenges []struct{ Type, URL, Token string }
	}
	if err := json.Unmarshal(keepHTTP01([]byte(authz)), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != "pending" || got.Identifier.Value != "db.example" || len(got.Challenges) != 1 ||
		got.Challenges[0].Type != "http-01" || got.Challenges[0].URL != "https://ca/c/2" || got.Challenges[0].Token != "t2" {
		t.Errorf("filtered authorization: %+v", got)
	}
	for _, same := range []string{
		`{"status":"valid","identifier":{"type":"dns","value":"db.example"},"challenges":[{"type":"http-01","url":"u"}]}`,
		`{"newNonce":"https://ca/nonce","newOrder":"https://ca/order"}`,
		`{"type":"tls-alpn-01","url":"u"}`,
		`{"challenges":[{"type":"tls-alpn-01"}]}`,
		`not json`,
	} {
		if out := string(keepHTTP01([]byte(same))); out != same {
			t.Errorf("keepHTTP01(%s) = %s, want it unchanged", same, out)
		}
	}
}

// FuzzKeepHTTP01: whatever the CA answers, the answer comes back unchanged
// or as an authorization whose challenges are all http-01; never a panic.
func FuzzKeepHTTP01(f *testing.F) {
	f.Add([]byte(`{"identifier":{"value":"a"},"challenges":[{"type":"tls-alpn-01"},{"type":"http-01"}]}`))
	f.Add([]byte(`{"identifier":null,"challenges":[null,1,"x",{"type":7}]}`))
	f.Add([]byte(`{"identifier":{},"challenges":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out := keepHTTP01(b)
		if string(out) == string(b) {
			return
		}
		var authz struct {
			Challenges []struct {
				Type string `json:"type"`
			} `json:"challenges"`
		}
		if err := json.Unmarshal(out, &authz); err != nil {
			t.Fatalf("changed into what does not decode: %v: %s", err, out)
		}
		for _, c := range authz.Challenges {
			if c.Type != "http-01" {
				t.Fatalf("a %q challenge kept: %s", c.Type, out)
			}
		}
	})
}
