package etcd

import (
	"os"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// TestMain says, among go test's ok lines, when tests skipped for want of
// the real store.
func TestMain(m *testing.M) { os.Exit(itest.Main(m)) }
