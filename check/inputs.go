package check

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/labels"
	pfile "github.com/tollgate-proxy/tollgate/provider/file"
)

// dynamic checks a dynamic YAML or TOML file as the file provider reads it.
// A file that does not decode is one problem, placed on the offending key or
// value when it can be found, and contributes nothing (the file provider
// would keep its last good configuration).
func (c *checker) dynamic(path, ext, content string, doc *yaml.Node) {
	d, err := pfile.DecodeContent(content, ext, path)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("file %q: ", path))
		if m := reNode.FindStringSubmatch(msg); m != nil && strings.Contains(msg, "field not found") {
			msg = fmt.Sprintf("unknown key %q (%s)", m[1], msg)
		}
		p := Problem{File: path, Severity: SeverityError, DisablesRouter: true, Message: msg + ": the file is not applied"}
		if doc != nil {
			if keyPath, line := blame(docRoot(doc), err.Error()); line > 0 {
				p.Key, p.Line = strings.Join(keyPath, "."), line
			}
		} else if k, ok := indexTOML(content).blame(err.Error()); ok {
			p.Key, p.Line = k.written, k.line
		}
		c.add(p)
		return
	}
	if d.TCP == nil {
		return
	}
	o := origin{file: path, isFile: true, doc: doc}
	if doc == nil {
		o.toml = indexTOML(content)
	}
	c.merge("file", d.TCP, o)
}

// labelFile checks a file of `key=value` labels (one per line, blank lines
// and lines starting with # ignored) as the labels of one container named
// after the file.
func (c *checker) labelFile(path, content string) {
	var ls []labelLine
	for i, line := range strings.Split(content, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			c.add(Problem{File: path, Line: i + 1, Severity: SeverityError, DisablesRouter: true,
				Message: fmt.Sprintf("line %q is not key=value", line)})
			return
		}
		ls = append(ls, labelLine{key: strings.TrimSpace(k), value: v, line: i + 1})
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	line := 0
	if len(ls) > 0 {
		line = ls[0].line
	}
	c.container(source{file: path, autoName: normalize(name), host: normalize(name), prov: "docker", line: line}, ls)
}

// compose checks every service of a docker-compose file as a container of
// the Docker provider: its `labels` (list or map form) decode as that
// container's labels; a service without a service label gets the Docker
// provider's automatic name "<service>-<project>".
func (c *checker) compose(path string, doc *yaml.Node) {
	root := docRoot(doc)
	project := composeProject(path, root)
	services := mapGet(root, "services")
	if services == nil || services.Kind != yaml.MappingNode {
		c.add(Problem{File: path, Severity: SeverityError, Message: "services is not a mapping"})
		return
	}
	for i := 0; i+1 < len(services.Content); i += 2 {
		name, svc := services.Content[i].Value, services.Content[i+1]
		ls, err := composeLabels(mapGet(svc, "labels"))
		if err != nil {
			c.add(Problem{File: path, Line: services.Content[i].Line, Service: name, Severity: SeverityError, DisablesRouter: true, Message: err.Error()})
			continue
		}
		if deploy := mapGet(svc, "deploy"); deploy != nil {
			dls, _ := composeLabels(mapGet(deploy, "labels"))
			for _, l := range dls {
				if strings.HasPrefix(strings.ToLower(l.key), "traefik.") {
					c.add(Problem{File: path, Line: l.line, Service: name, Key: l.key, Severity: SeverityWarning,
						Message: "deploy.labels are Swarm service labels: the Docker provider reads container labels (move it to labels)"})
				}
			}
		}
		c.container(source{file: path, service: name, autoName: normalize(name + "-" + project), host: name, prov: "docker", line: services.Content[i].Line}, withPort(ls, svc))
	}
}

// withPort is ls plus what the automatic server needs: the lowest container
// port the compose file exposes, kept as a pseudo-label the container step
// reads (it never reaches the decoder).
func withPort(ls []labelLine, svc *yaml.Node) []labelLine {
	low := 0
	for _, key := range []string{"expose", "ports"} {
		n := mapGet(svc, key)
		if n == nil || n.Kind != yaml.SequenceNode {
			continue
		}
		for _, e := range n.Content {
			if p := containerPort(e); p > 0 && (low == 0 || p < low) {
				low = p
			}
		}
	}
	if low > 0 {
		ls = append(ls, labelLine{key: exposedPortKey, value: strconv.Itoa(low)})
	}
	return ls
}

const exposedPortKey = "\x00exposed-port"

// containerPort reads the container side of an expose or ports entry:
// "7000", "8080:7000", "127.0.0.1:8080:7000/tcp", or {target: 7000}.
func containerPort(n *yaml.Node) int {
	if n.Kind == yaml.MappingNode {
		if t := mapGet(n, "target"); t != nil {
			p, _ := strconv.Atoi(t.Value)
			return p
		}
		return 0
	}
	v := n.Value
	if i := strings.IndexByte(v, '/'); i >= 0 {
		if !strings.EqualFold(v[i+1:], "tcp") {
			return 0
		}
		v = v[:i]
	}
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	v, _, _ = strings.Cut(v, "-") // a range: its first port
	p, _ := strconv.Atoi(v)
	return p
}

// composeProject is the compose project name: `name:`, else the folder of
// the file, lower-cased with what compose does not allow removed.
func composeProject(path string, root *yaml.Node) string {
	if n := mapGet(root, "name"); n != nil && n.Value != "" {
		return n.Value
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	dir := strings.ToLower(filepath.Base(filepath.Dir(abs)))
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return -1
	}, dir)
}

// composeLabels reads `labels` in list form ("k=v") or map form (k: v).
func composeLabels(n *yaml.Node) ([]labelLine, error) {
	if n == nil {
		return nil, nil
	}
	var out []labelLine
	switch n.Kind {
	case yaml.SequenceNode:
		for _, e := range n.Content {
			k, v, _ := strings.Cut(e.Value, "=")
			out = append(out, labelLine{key: strings.TrimSpace(k), value: v, line: e.Line})
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, labelLine{key: n.Content[i].Value, value: n.Content[i+1].Value, line: n.Content[i].Line})
		}
	default:
		return nil, fmt.Errorf("labels (line %d) is neither a list nor a map", n.Line)
	}
	return out, nil
}

// source is one container (Docker) or service instance (Consul) whose
// labels or tags check decodes.
type source struct {
	file     string
	service  string // compose or Consul service name, for Problem.Service
	autoName string // the provider's automatic TCP service name
	host     string // the server's host in the shown address
	port     string // Consul: the registered port ("" when none)
	prov     string // "docker" or "consulcatalog"
	line     int    // where the container or service is declared, for problems about it as a whole
}

// container checks one container's labels (or one Consul service's tags,
// turned into labels) as the providers do: traefik.enable and the
// traefik.docker.* knobs, then the traefik.tcp.* labels; a source whose
// labels fail to decode is skipped whole. Servers point at
// "<host>:<port>", since the real address is only known at run time.
func (c *checker) container(src source, ls []labelLine) {
	path, service := src.file, src.service
	m := map[string]string{}
	port := src.port
	var decoded []labelLine
	for _, l := range ls {
		if l.key == exposedPortKey {
			port = l.value
			continue
		}
		m[l.key] = l.value
		decoded = append(decoded, l)
	}
	find := func(key string) *labelLine {
		for i := range decoded {
			if decoded[i].key == key {
				return &decoded[i]
			}
		}
		return nil
	}
	hasRouter := false
	for k := range m {
		if strings.HasPrefix(strings.ToLower(k), "traefik.tcp.routers.") {
			hasRouter = true
		}
	}
	what := "container"
	if src.prov == "consulcatalog" {
		what = "service"
	}
	fail := func(err error) {
		p := Problem{File: path, Line: src.line, Service: service, Severity: SeverityError, DisablesRouter: hasRouter,
			Message: err.Error() + ": the " + what + " is skipped"}
		var le *labels.Error
		if errors.As(err, &le) {
			p.Key = le.Key
			if l := find(le.Key); l != nil {
				p.Key, p.Line = l.written(), l.line
			}
			p.Message = le.Err.Error() + ": the " + what + " is skipped"
		}
		c.add(p)
	}
	knobs, err := labels.DecodeKnobs(m)
	if err != nil {
		fail(err)
		return
	}
	enabled := c.opts.ExposedByDefault
	if knobs.Enable != nil {
		enabled = *knobs.Enable
	}
	if !enabled {
		return
	}
	conf, err := labels.Decode(m)
	if err != nil {
		fail(err)
		return
	}
	tcp := conf.TCP
	if tcp == nil || (len(tcp.Routers) == 0 && len(tcp.Services) == 0 && len(tcp.Middlewares) == 0) {
		return
	}
	if len(tcp.Routers) > 0 || len(tcp.Services) > 0 {
		if len(tcp.Services) == 0 {
			tcp.Services = map[string]*config.TCPService{src.autoName: {LoadBalancer: &config.TCPServersLoadBalancer{}}}
		}
		for _, name := range sortedKeys(tcp.Services) {
			lb := tcp.Services[name].LoadBalancer
			if lb == nil {
				c.add(Problem{File: path, Line: src.line, Service: service, Severity: SeverityError, DisablesRouter: hasRouter,
					Message: fmt.Sprintf("service %q has no loadBalancer (weighted services cannot be declared in labels or tags): the %s is skipped", name, what)})
				return
			}
			p := port
			if len(lb.Servers) > 0 && lb.Servers[0].Port != "" {
				p = lb.Servers[0].Port
			}
			if p == "" && src.prov == "consulcatalog" {
				c.add(Problem{File: path, Line: src.line, Service: service, Severity: SeverityError, DisablesRouter: hasRouter,
					Message: fmt.Sprintf("tcp service %q: port is missing: register the service with a port or tag it %s.tcp.services.%s.loadbalancer.server.port=<port>: the service is skipped", name, c.prefix(), name)})
				return
			}
			if p == "" {
				p = "<lowest port the image exposes>"
			}
			lb.Servers = []config.TCPServer{{Address: src.host + ":" + p}}
		}
		for _, name := range sortedKeys(tcp.Routers) {
			r := tcp.Routers[name]
			if r.Service == "" && len(tcp.Services) == 1 {
				for s := range tcp.Services {
					r.Service = s
				}
			} else if r.Service == "" {
				p := Problem{File: path, Service: service, Resource: name + "@" + src.prov, Severity: SeverityError, DisablesRouter: true,
					Message: fmt.Sprintf("router %q has no service and the %s defines %d services (%s): dropped (set traefik.tcp.routers.%s.service)",
						name, what, len(tcp.Services), strings.Join(sortedKeys(tcp.Services), ", "), name)}
				c.locate(&p, origin{file: path, service: service, labels: decoded}, "routers", name, "")
				c.add(p)
				delete(tcp.Routers, name)
			}
		}
	}
	c.merge(src.prov, tcp, origin{file: path, service: service, labels: decoded})
}

func (c *checker) prefix() string {
	if c.opts.Prefix == "" {
		return labels.Root
	}
	return c.opts.Prefix
}

// consul checks Consul service definitions, as the agent loads them from its
// config directory ({"service": {...}} or {"services": [...]}), or a bare
// JSON list of tags (one service named after the file): the tags are read
// as the Consul Catalog provider reads them (<prefix>.* tags with "=" only),
// one healthy instance per service at its address and port.
func (c *checker) consul(path string, doc *yaml.Node) {
	root := docRoot(doc)
	var services []*yaml.Node
	switch {
	case root == nil:
		return
	case root.Kind == yaml.SequenceNode:
		services = []*yaml.Node{{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: "name"}, {Kind: yaml.ScalarNode, Value: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))},
			{Kind: yaml.ScalarNode, Value: "tags"}, root,
		}}}
	case mapGet(root, "service") != nil:
		services = []*yaml.Node{mapGet(root, "service")}
	case mapGet(root, "services") != nil && mapGet(root, "services").Kind == yaml.SequenceNode:
		services = mapGet(root, "services").Content
	default:
		c.add(Problem{File: path, Line: root.Line, Severity: SeverityError,
			Message: `not a Consul service definition: want {"service": {...}}, {"services": [...]} or a list of tags`})
		return
	}
	prefix := c.prefix()
	for _, svc := range services {
		name := scalar(mapGet(svc, "name"))
		if name == "" {
			c.add(Problem{File: path, Line: svc.Line, Severity: SeverityError, Message: "service without a name"})
			continue
		}
		var ls []labelLine
		if tags := mapGet(svc, "tags"); tags != nil {
			for _, t := range tags.Content {
				lbl := labels.TagsToLabels([]string{t.Value}, prefix)
				for k, v := range lbl {
					shown, _, _ := strings.Cut(t.Value, "=")
					ls = append(ls, labelLine{key: k, value: v, line: t.Line, shown: shown})
				}
			}
		}
		host := scalar(mapGet(svc, "address"))
		if host == "" {
			host = "<node address>"
		}
		port := scalar(mapGet(svc, "port"))
		if port == "0" {
			port = ""
		}
		c.container(source{file: path, service: name, autoName: normalize(name), host: host, port: port, prov: "consulcatalog", line: svc.Line}, ls)
	}
}

func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// normalize is the Docker provider's name normalisation: runs of characters
// other than letters and digits become one "-", trimmed at both ends.
func normalize(name string) string {
	return strings.Join(strings.FieldsFunc(name, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}), "-")
}

// YAML helpers.

func docRoot(doc *yaml.Node) *yaml.Node {
	if doc == nil {
		return nil
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		return doc.Content[0]
	}
	return doc
}

// mapGet returns the value of key in a mapping node (keys compared without
// case, as paerser does), or nil.
func mapGet(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if strings.EqualFold(n.Content[i].Value, key) {
			return n.Content[i+1]
		}
	}
	return nil
}

// findPath follows path (case-insensitive keys) from n as far as it goes and
// returns the keys as written and the line of the last one found.
func findPath(n *yaml.Node, path []string) ([]string, int) {
	var written []string
	line := 0
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			break
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if strings.EqualFold(n.Content[i].Value, key) {
				written = append(written, n.Content[i].Value)
				line = n.Content[i].Line
				n = n.Content[i+1]
				found = true
				break
			}
		}
		if !found {
			break
		}
	}
	return written, line
}

var (
	reNode       = regexp.MustCompile(`node: (\S+)`)
	reStandalone = regexp.MustCompile(`(\S+) cannot be a standalone element`)
	reParsing    = regexp.MustCompile(`parsing "((?:[^"\\]|\\.)*)"`)
)

// blame finds the key a paerser decode error is about in a YAML tree: the
// key it names ("field not found, node: rulez", "inFlightConn cannot be a
// standalone element") or the scalar whose value failed to parse. It
// returns the key path as written and its line.
func blame(root *yaml.Node, msg string) ([]string, int) {
	var keyName, value string
	if m := reNode.FindStringSubmatch(msg); m != nil {
		keyName = m[1]
	} else if m := reStandalone.FindStringSubmatch(msg); m != nil {
		keyName = m[1]
	} else if m := reParsing.FindStringSubmatch(msg); m != nil {
		value, _ = strconv.Unquote(`"` + m[1] + `"`)
	} else {
		return nil, 0
	}
	var hits [][]string
	var lines []int
	var walk func(n *yaml.Node, path []string)
	walk = func(n *yaml.Node, path []string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := append(append([]string(nil), path...), k.Value)
				if keyName != "" && strings.EqualFold(k.Value, keyName) {
					hits, lines = append(hits, p), append(lines, k.Line)
				}
				if keyName == "" && v.Kind == yaml.ScalarNode && v.Value == value {
					hits, lines = append(hits, p), append(lines, k.Line)
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				p := append(append([]string(nil), path...), strconv.Itoa(i))
				if keyName == "" && e.Kind == yaml.ScalarNode && e.Value == value {
					hits, lines = append(hits, p), append(lines, e.Line)
				}
				walk(e, p)
			}
		}
	}
	if root != nil {
		walk(root, nil)
	}
	if len(hits) == 0 {
		return nil, 0
	}
	return hits[0], lines[0] // the first in document order
}
