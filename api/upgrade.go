package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/upgrade"
)

// upgradeWait bounds POST /api/upgrade: the new process has 30 s to load its
// configuration, plus its start and the handover.
const upgradeWait = 75 * time.Second

// upgradeHandler is POST /api/upgrade, the admin API's one write (README,
// "Upgrading in place"): it starts a binary upgrade and answers once the
// outcome is known: 200 with the new process's PID and generation, 409
// when an upgrade is already under way (or this process has handed over),
// 500 with the reason it failed (the old process serves on). A request a
// browser sends from a page (it has an Origin header) is refused: a page on
// any site could otherwise make a browser on the admin's machine post here.
func (s Sources) upgradeHandler(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
		writeError(w, http.StatusForbidden, "upgrade requests from a browser page are refused: use tollgate upgrade, curl -X POST, or SIGUSR2")
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
