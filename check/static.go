package check

import (
	"fmt"
	"io"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/cmdline"
	"github.com/tollgate-proxy/tollgate/internal/preflight"
)

// Static is `tollgate check --static`: the static configuration, read from
// the same sources as a start (start says what of them configures
// nothing), goes through the checks a start makes before it opens
// anything (internal/preflight), and what a start would log about it at
// warning and info level is printed to w, one line each. It reaches no
// provider, CA or store, and binds no socket.
func Static(st *config.Static, start cmdline.Start, w io.Writer) error {
	rep, err := preflight.Check(st, start)
	if err != nil {
		return err
	}
	for _, n := range rep.Notices {
		level := "info"
		if n.Warn {
			level = "warning"
		}
		fmt.Fprintf(w, "%s: %s\n", level, n)
	}
	fmt.Fprintf(w, "ok: the static configuration starts tollgate (warnings: %d)\n", rep.Warnings())
	return nil
}
