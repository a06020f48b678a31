package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/upgrade"
)

// POST /api/upgrade: off (403) without a token; with one, 401 without it
// or with another, 403 from a browser page, and only then the upgrade: 200,
// or 409 when it cannot start now.
func TestUpgradeEndpointNeedsTheToken(t *testing.T) {
	const token = "0123456789abcdef-token"
	calls := 0
	var busy bool
	src := Sources{Upgrade: func(context.Context) (upgrade.Result, error) {
		calls++
		if busy {
			return upgrade.Result{}, fmt.Errorf("%w: the previous generation (PID 1) is still draining", upgrade.ErrBusy)
		}
		return upgrade.Result{PID: 42, Generation: 2}, nil
	}}
	post := func(src Sources, header ...string) (int, string, http.Header) {
		r := httptest.NewRequest(http.MethodPost, "/api/upgrade", nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		Handler(src).ServeHTTP(w, r)
		return w.Code, w.Body.String(), w.Header()
	}
	if code, body, _ := post(src, "Authorization", "Bearer "+token); code != 403 || !strings.Contains(body, "api.upgradeTokenFile") {
		t.Fatalf("without api.upgradeTokenFile: %d %s", code, body)
	}
	src.UpgradeToken = token
	for _, auth := range []string{"", "Bearer", "Bearer wrong", "Basic " + token, "Bearer " + token + "x"} {
		code, body, h := post(src, "Authorization", auth)
		if code != 401 || !strings.Contains(body, "token") || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: %d %s", auth, code, body)
		}
	}
	if code, _, _ := post(src, "Authorization", "Bearer "+token, "Origin", "http://evil.example"); code != 403 {
		t.Fatalf("from a browser page: %d, want 403", code)
	}
	if calls != 0 {
		t.Fatalf("refused requests started %d upgrades", calls)
	}
	if code, body, _ := post(src, "Authorization", "Bearer "+token); code != 200 || !strings.Contains(body, `"pid": 42`) {
		t.Fatalf("with the token: %d %s", code, body)
	}
	busy = true
	if code, body, _ := post(src, "Authorization", "Bearer "+token); code != 409 || !strings.Contains(body, "still draining") {
		t.Fatalf("while a generation drains: %d %s, want 409 and why", code, body)
	}
}
