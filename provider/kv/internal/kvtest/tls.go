package kvtest

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-proxy/tollgate/internal/itest"
)

// Cert writes a fresh self-signed certificate for 127.0.0.1 and localhost
// (its own CA: servers and clients alike trust it) to dir and returns the
// PEM files of the certificate and its key.
func Cert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	cert, _ := itest.SelfSigned(t, "localhost", "127.0.0.1")
	return itest.WritePEM(t, dir, cert)
}

// Routed starts tollgate with flags, writes one router with put, and waits
// until it is enabled as r@prov; it returns the tollgate.
func Routed(t *testing.T, prov string, flags []string, put func(k, v string)) *itest.Tollgate {
	t.Helper()
	backend := itest.EchoServer(t, "")
	tg := itest.StartTollgate(t, append([]string{"--entryPoints.db.address=" + itest.FreeAddr(t)}, flags...)...)
	put("traefik/tcp/services/s/loadBalancer/servers/0/address", backend)
	put("traefik/tcp/routers/r/rule", "HostSNI(`*`)")
	itest.Eventually(t, 5*time.Second, func() bool { return tg.Rawdata(t).Routers["r@"+prov].Status == "enabled" },
		"r@%s enabled: %+v", prov, tg.Rawdata(t).Provider(prov))
	return tg
}

// Failing starts tollgate with flags and waits until provider prov reports
// an error that contains want.
func Failing(t *testing.T, prov string, flags []string, want string) {
	t.Helper()
	tg := itest.StartTollgate(t, append([]string{"--entryPoints.db.address=" + itest.FreeAddr(t)}, flags...)...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rp := tg.Rawdata(t).Provider(prov)
		if rp.State == "error" && strings.Contains(rp.LastError, want) {
			t.Logf("%s: %s", prov, rp.LastError)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %s: state %q, last error %q; want an error with %q", prov, rp.State, rp.LastError, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
