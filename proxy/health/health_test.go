package health

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
)

func TestNewSpec(t *testing.T) {
	s, _, err := NewSpec(&config.TCPHealthCheck{})
	if err != nil || s.Interval != DefaultInterval || s.Timeout != DefaultTimeout {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	for _, tc := range []struct {
		hc   config.TCPHealthCheck
		want string
	}{
		{config.TCPHealthCheck{Interval: config.Duration(-time.Second)}, "healthCheck.interval=-1s"},
		{config.TCPHealthCheck{Timeout: config.Duration(-time.Second)}, "healthCheck.timeout=-1s"},
		{config.TCPHealthCheck{Port: 70000}, "healthCheck.port=70000"},
	} {
		if _, _, err := NewSpec(&tc.hc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.hc, err, tc.want)
		}
	}
	withPort := Spec{Port: 8080}
	if got, err := withPort.Target("10.0.0.1:5432"); err != nil || got != "10.0.0.1:8080" {
		t.Errorf("Target: %q, %v", got, err)
	}
}

// A checker is probed at once, kept by an Acquire with the same spec, and
// stopped by a Sweep that no longer names its service.
func TestRegistry(t *testing.T) {
	dead := itest.RefusedAddr(t)
	var r Registry
	defer r.Close()
	spec := Spec{Interval: time.Hour, Timeout: 100 * time.Millisecond}
	ups := r.Acquire("s@file", spec, []string{dead}, zerolog.Nop(), nil)
	itest.Eventually(t, 2*time.Second, func() bool { return !ups[0].Load() }, "a refused server DOWN after its first probe")
	c := r.Checker("s@file", dead)
	if again := r.Acquire("s@file", spec, []string{dead}, zerolog.Nop(), nil); again[0] != ups[0] || r.Checker("s@file", dead) != c {
		t.Fatal("an Acquire with the same spec restarted the checker")
	}
	if got := r.All(); len(got) != 1 || got[0].Up {
		t.Fatalf("All: %+v", got)
	}
	r.Sweep() // the Compile that acquired it
	r.Sweep() // one that did not
	select {
	case <-c.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the checker of a service no Compile names still runs")
	}
	if r.Status("s@file") != nil {
		t.Fatal("a swept service still has a status")
	}
}
