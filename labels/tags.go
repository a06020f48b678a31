package labels

import "strings"

// TagsToLabels turns Consul service tags into the label map that Decode and
// DecodeKnobs read, so Consul tags and Docker labels share one decoder.
//
// Only tags that start with prefix followed by "." (case-insensitively) and
// contain "=" are kept; every other tag (plain markers such as "primary",
// tags of other tools) is ignored. A kept tag is split on its first "=" into
// key and value, and the prefix is rewritten to the "traefik" root:
// with prefix "tollgate", "tollgate.tcp.routers.r.rule=HostSNI(`*`)" becomes
// the label "traefik.tcp.routers.r.rule" = "HostSNI(`*`)".
//
// An empty prefix means "traefik". When two tags give the same key, the later
// tag wins. The returned map is never nil and is owned by the caller.
func TagsToLabels(tags []string, prefix string) map[string]string {
	if prefix == "" {
		prefix = Root
	}
	lead := prefix + "."
	out := make(map[string]string, len(tags))
	for _, tag := range tags {
		if len(tag) < len(lead) || !strings.EqualFold(tag[:len(lead)], lead) {
			continue
		}
		key, value, ok := strings.Cut(tag, "=")
		if !ok {
			continue
		}
		out[Root+"."+key[len(lead):]] = value
	}
	return out
}
