package e2e

import (
	"os"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// TestMain says, among go test's ok lines, when tests skipped for want of
// a component (itest.Main).
func TestMain(m *testing.M) { os.Exit(itest.Main(m)) }
