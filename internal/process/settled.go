package process

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/provider"
)

// settled knows when a new process serves the configuration its
// predecessor served: each provider that had delivered there has delivered
// here, and what was applied is the merge of everything delivered since.
// It sees the providers' messages on their way to the watcher and the
// watcher's applies.
type settled struct {
	mu      sync.Mutex
	latest  map[string]*config.Dynamic
	lastErr map[string]error
	last    *config.TCPConfiguration
	ok      bool // a configuration was applied
}

func (s *settled) relay(ctx context.Context, in <-chan provider.Message, out chan<- provider.Message) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			s.mu.Lock()
			if s.latest == nil {
				s.latest, s.lastErr = map[string]*config.Dynamic{}, map[string]error{}
			}
			if m.Err != nil {
				s.lastErr[m.ProviderName] = m.Err
			} else {
				s.latest[m.ProviderName] = m.Configuration
			}
			s.mu.Unlock()
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
	}
}

func (s *settled) applied(c *config.TCPConfiguration) {
	s.mu.Lock()
	s.last, s.ok = c, true
	s.mu.Unlock()
}

// wait returns once every provider of need has delivered and the merge of
// all delivered configurations is the one applied, or an error: a provider
// of need reported an error before it delivered (it would serve nothing of
// what the old process serves), or the time ran out.
func (s *settled) wait(need []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		missing, failed := "", error(nil)
		for _, name := range need {
			if _, ok := s.latest[name]; !ok {
				missing = name
				if e := s.lastErr[name]; e != nil {
					failed = fmt.Errorf("provider %s: %w (the old process serves its last configuration from it; this one has none)", name, e)
				}
				break
			}
		}
		done := missing == "" && (len(need) == 0 || s.ok && reflect.DeepEqual(provider.Merge(s.latest), s.last))
		s.mu.Unlock()
		switch {
		case failed != nil:
			return failed
		case done:
			return nil
		case time.Now().After(deadline):
			if missing != "" {
				return fmt.Errorf("provider %s delivered no configuration within %s", missing, within)
			}
			return fmt.Errorf("the configuration was not applied within %s", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
