package acme

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxAnswer bounds a JSON answer from the CA that onlyHTTP01 reads whole
// (directory, account, order, authorization: a few KiB each).
const maxAnswer = 1 << 20

// onlyHTTP01 passes the CA's answers on with every challenge but http-01
// taken out of the authorizations, for a resolver with httpChallenge alone.
// autocert tries tls-alpn-01 before http-01 and starts a new order when a
// validation fails: offered both, it would fail one TLS-ALPN-01 validation
// per issuance wherever port 443 does not reach a tollgate entry point,
// each failure counted against the CA's limits (Let's Encrypt allows five
// per name and hour). Offered http-01 alone, it goes straight to it.
type onlyHTTP01 struct{ next http.RoundTripper }

func (o onlyHTTP01) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.next.RoundTrip(req)
	if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL.Redacted(), err)
	}
	if len(body) > maxAnswer {
		return nil, fmt.Errorf("%s: an answer of over %d bytes", req.URL.Redacted(), maxAnswer)
	}
	body = keepHTTP01(body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// keepHTTP01 returns an ACME authorization (RFC 8555, 7.1.4: an object with
// an identifier and challenges) with its challenges other than http-01
// left out, and any other answer as it is.
func keepHTTP01(body []byte) []byte {
	var authz map[string]json.RawMessage
	if json.Unmarshal(body, &authz) != nil {
		return body
	}
	raw, ok := authz["challenges"]
	if _, id := authz["identifier"]; !ok || !id {
		return body
	}
	var challenges []json.RawMessage
	if json.Unmarshal(raw, &challenges) != nil {
		return body
	}
	kept := []json.RawMessage{}
	for _, c := range challenges {
		var ch struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(c, &ch) == nil && ch.Type == "http-01" {
			kept = append(kept, c)
		}
	}
	if len(kept) == len(challenges) {
		return body
	}
	authz["challenges"], _ = json.Marshal(kept)
	out, err := json.Marshal(authz)
	if err != nil {
		return body
	}
	return out
}
