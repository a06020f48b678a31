package upgrade

import "sort"

// Match gives each listener a new process is configured with (want: its
// name, an entry point's or an admin listener's key, to its address) the
// listening socket it takes over from inherited, if any: the one with the
// same name and address first (a listener kept as it was), then one with the
// same address under another name (an entry point renamed, or one that
// became an internal entry point serving /ping or /metrics, or the reverse).
// Without the second, such a listener would try to bind an address the old
// process still holds and the upgrade would fail; with it, the socket and
// the connections waiting in its queue carry over, as HAProxy matches
// sockets by address at a reload. Each socket goes to one listener at most;
// what is not matched is the caller's to close. The result maps the name in
// want to the socket, whose Name and Address are the old process's.
//
// Addresses are compared by key: what each binds (proxy.ListenKey), so that
// "localhost:5432" takes over the socket of "127.0.0.1:5432"; a nil key
// compares them as written.
func Match(inherited []Listener, want map[string]string, key func(addr string) string) map[string]Listener {
	if key == nil {
		key = func(addr string) string { return addr }
	}
	keys := make([]string, len(inherited))
	for i, l := range inherited {
		keys[i] = key(l.Address)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names) // a socket two names could take goes to the same one each time
	got := map[string]Listener{}
	taken := make([]bool, len(inherited))
	for _, name := range names {
		k := key(want[name])
		for i, l := range inherited {
			if !taken[i] && l.Name == name && keys[i] == k {
				got[name], taken[i] = l, true
				break
			}
		}
	}
	for _, name := range names {
		if _, ok := got[name]; ok {
			continue
		}
		k := key(want[name])
		for i, l := range inherited {
			if !taken[i] && keys[i] == k {
				got[name], taken[i] = l, true
				break
			}
		}
	}
	return got
}
