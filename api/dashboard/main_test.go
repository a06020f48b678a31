package dashboard_test

import (
	"os"
	"testing"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func TestMain(m *testing.M) { os.Exit(itest.Main(m)) }
