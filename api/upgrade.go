package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/upgrade"
)

// upgradeWait bounds POST /api/upgrade: the new process has 30 s to load its
// configuration, plus its start and the handover.
const upgradeWait = 75 * time.Second

// upgradeHandler is POST /api/upgrade, the admin API's one write
// (docs/operations/upgrading.md): it starts a binary upgrade and answers once the
// outcome is known: 200 with the new process's PID and generation, 409
// with the reason when one cannot start now (one under way, this process
// handed over, the previous generation still draining), 500 with the
// reason it failed (the old process serves on).
//
// It is off unless the operator set api.upgradeTokenFile (403 saying so),
// and then takes only a request carrying that token (Authorization: Bearer,
// 401 otherwise), so that no other local user, and no request forged by an
// application on the host (SSRF), starts upgrades. A request a browser sends
// from a page (it has an Origin header) is refused too.
func (s Sources) upgradeHandler() http.HandlerFunc {
	var lastRefusal atomic.Int64 // unix nanoseconds of the last refusal logged
	refuse := func(w http.ResponseWriter, r *http.Request, code int, msg string) {
		if now := time.Now().UnixNano(); now-lastRefusal.Load() >= int64(time.Second) {
			lastRefusal.Store(now) // a flood of refusals logs one line a second
			s.Log.Warn().Str("client", r.RemoteAddr).Int("status", code).Msg("POST /api/upgrade refused: " + msg)
		}
		if code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate upgrade"`)
		}
		writeError(w, code, msg)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if s.UpgradeToken == "" {
			refuse(w, r, http.StatusForbidden, "upgrades over HTTP are off: set api.upgradeTokenFile (a file holding a token; tollgate upgrade sends it), or send SIGUSR2 to the process")
			return
		}
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
			refuse(w, r, http.StatusForbidden, "upgrade requests from a browser page are refused: use tollgate upgrade, curl -X POST, or SIGUSR2")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.UpgradeToken)) != 1 {
			refuse(w, r, http.StatusUnauthorized, "no or wrong upgrade token: send Authorization: Bearer <the token of api.upgradeTokenFile> (tollgate upgrade does)")
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(upgradeWait + 5*time.Second))
		ctx, cancel := context.WithTimeout(r.Context(), upgradeWait)
		defer cancel()
		res, err := s.Upgrade(ctx)
		switch {
		case errors.Is(err, upgrade.ErrBusy):
			writeError(w, http.StatusConflict, err.Error())
		case err != nil:
			writeError(w, http.StatusInternalServerError, "upgrade failed, this process serves on: "+err.Error())
		default:
			writeJSON(w, http.StatusOK, res)
		}
	}
}
