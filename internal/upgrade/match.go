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
// want to the socket, whose Name is the old process's.
func Match(inherited []Listener, want map[string]string) map[string]Listener {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names) // a socket two names could take goes to the same one each time
	got := map[string]Listener{}
	taken := make([]bool, len(inherited))
	for _, name := range names {
		for i, l := range inherited {
			if !taken[i] && l.Name == name && l.Address == want[name] {
				got[name], taken[i] = l, true
				break
			}
		}
	}
	for _, name := range names {
		if _, ok := got[name]; ok {
			continue
		}
		for i, l := range inherited {
			if !taken[i] && l.Address == want[name] {
				got[name], taken[i] = l, true
				break
			}
		}
	}
	return got
}
