package check

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/decodeerr"
	"github.com/tollgate-proxy/tollgate/labels"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/consulcatalog"
	"github.com/tollgate-proxy/tollgate/provider/docker"
	pfile "github.com/tollgate-proxy/tollgate/provider/file"
)

// dynamic checks a dynamic YAML or TOML file as the file provider reads it:
// rendered as a template, then decoded (doc is the YAML of content, or nil).
// A file that does not render or decode is one problem, placed on the
// offending line, key or value when it can be found, and contributes nothing
// (the file provider would keep its last good configuration); a resource
// with a key that does not decode is a problem on that key, and the rest
// of the file applies. The problems of a file that is a template are placed
// on the text it renders.
func (c *checker) dynamic(path, ext, content string, doc *lazyDoc) {
	d, rendered, dropped, err := pfile.DecodeAll(content, ext, path)
	if err != nil {
		p := Problem{File: path, Severity: SeverityError, DisablesRouter: true, Message: err.Error() + ": the file is not applied"}
		var de *pfile.DecodeError
		if errors.As(err, &de) { // placed by the file provider's decoder, as it logs it
			p.Key, p.Line, p.Message = de.Key, de.Line, de.Message()+": the file is not applied"
			if de.Rendered && de.Line > 0 {
				// Not a line of the file: said, not placed.
				p.Line, p.Message = 0, p.Message+fmt.Sprintf(" (line %d of the text its template renders)", de.Line)
			}
		}
		c.add(p)
		return
	}
	if err := (*config.Limits)(nil).Resolved().Check(d); err != nil {
		// The file provider would refuse it (the defaults: check has no
		// static configuration).
		c.add(Problem{File: path, Severity: SeverityError, DisablesRouter: true, Message: err.Error()})
		return
	}
	for _, e := range dropped { // placed by the file provider's decoder, as it logs them
		p := Problem{File: path, Key: e.Key, Line: e.Line, Resource: provider.Qualify(e.Resource.Name, pfile.Name),
			Severity: SeverityError, DisablesRouter: e.Resource.Kind == provider.KindRouter, Message: e.Message()}
		if e.Rendered && e.Line > 0 {
			p.Line, p.Message = 0, p.Message+fmt.Sprintf(" (line %d of the text its template renders)", e.Line)
		}
		c.add(p)
	}
	var ignored []pfile.Ignored
	if doc != nil && doc.haveKeys && rendered == content {
		ignored = pfile.IgnoredOf(doc.keys) // found already: not read again
	} else {
		ignored = pfile.IgnoredSections(rendered, ext)
	}
	for _, ig := range ignored {
		p := Problem{File: path, Key: ig.Section, Severity: SeverityWarning, Message: ig.Message()}
		if rendered == content {
			p.Line = ig.Line // else a line of the text the template renders
		}
		c.add(p)
	}
	if d.TCP == nil && d.TLS == nil {
		return
	}
	o := origin{file: path, fileIdx: c.files, isFile: true, doc: doc}
	switch {
	case rendered != content:
		// A template: the lines of what it renders are not the file's, so
		// its problems are placed on their keys alone.
		o.doc = nil
	case doc == nil:
		o.toml = decodeerr.IndexTOML(content)
	}
	// The TLS files it names, read as the file provider reads them: one it
	// cannot read is a problem on the key that names it.
	d, _, unread := pfile.ReadTLSFiles(d)
	for _, e := range unread {
		p := Problem{File: path, Severity: SeverityError, DisablesRouter: true, Message: e.Message()}
		c.locatePath(&p, o, e.Key, e.KeyString())
		c.add(p)
	}
	c.mergeFile(d, o)
}

// labelFile reads a file of `key=value` labels (one per line, blank lines
// and lines starting with # ignored) as the labels of one running container
// named after the file, reachable under that name.
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
	o := origin{file: path, fileIdx: c.files}
	if len(ls) > 0 {
		o.line = ls[0].line
	}
	c.container(o, name, provider.Normalize(name), ls, nil, nil)
}

// compose reads every service of a docker-compose file as one running
// container of the Docker provider, as compose creates it: its `labels`
// (list or map form) plus compose's project and service labels, the ports
// it lists under expose and ports, and the service name as its address on
// the project network. A service's deploy.labels make it a Swarm service
// too (stackService).
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
		c.stackService(path, project, root, name, services.Content[i].Line, svc) // deploy.labels: swarm.go
		ls, err := composeLabels(mapGet(svc, "labels"))
		if err != nil {
			c.add(Problem{File: path, Line: services.Content[i].Line, Service: name, Severity: SeverityError, DisablesRouter: true, Message: err.Error()})
			continue
		}
		o := origin{file: path, fileIdx: c.files, service: name, line: services.Content[i].Line}
		extra := map[string]string{docker.LabelComposeProject: project, docker.LabelComposeService: name}
		c.container(o, name, name, ls, extra, composePorts(svc))
	}
}

// container adds one running, healthy container named name, whose address
// is host, with the labels ls (plus extra, not shown in problems) and the
// exposed ports. The image's own exposed ports are not known here.
func (c *checker) container(o origin, name, host string, ls []labelLine, extra map[string]string, ports []docker.Port) {
	lbls := make(map[string]string, len(ls)+len(extra))
	for _, l := range ls {
		lbls[l.key] = l.value
	}
	for k, v := range extra {
		lbls[k] = v
	}
	o.labels = ls
	id := fmt.Sprintf("%s#%d", o.file, len(c.containers))
	c.inputs[id] = o
	c.containers = append(c.containers, docker.Container{
		ID: id, Name: name, Labels: lbls, State: "running",
		Networks: map[string]string{"default": host}, Ports: ports, ImagePortsUnknown: true,
	})
}

// composePorts reads the container ports a compose service lists under
// expose and ports.
func composePorts(svc *yaml.Node) []docker.Port {
	var out []docker.Port
	for _, key := range []string{"expose", "ports"} {
		n := mapGet(svc, key)
		if n == nil || n.Kind != yaml.SequenceNode {
			continue
		}
		for _, e := range n.Content {
			if p, proto := containerPort(e); p > 0 {
				out = append(out, docker.Port{Port: p, Proto: proto})
			}
		}
	}
	return out
}

// containerPort reads the container side of an expose or ports entry:
// "7000", "8080:7000", "127.0.0.1:8080:7000/tcp", or {target: 7000,
// protocol: udp}; a range stands for its first port.
func containerPort(n *yaml.Node) (int, string) {
	if n.Kind == yaml.MappingNode {
		t := mapGet(n, "target")
		if t == nil {
			return 0, ""
		}
		p, _ := strconv.Atoi(t.Value)
		proto := "tcp"
		if pr := scalar(mapGet(n, "protocol")); pr != "" {
			proto = strings.ToLower(pr)
		}
		return p, proto
	}
	v, proto := n.Value, "tcp"
	if i := strings.IndexByte(v, '/'); i >= 0 {
		v, proto = v[:i], strings.ToLower(v[i+1:])
	}
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	v, _, _ = strings.Cut(v, "-")
	p, _ := strconv.Atoi(v)
	return p, proto
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

func (c *checker) prefix() string {
	if c.opts.Prefix == "" {
		return labels.Root
	}
	return c.opts.Prefix
}

// consulNode is the node check registers Consul service definitions on, and
// consulNodeAddress its address (a service without an address of its own is
// reached on the node's).
const (
	consulNode        = "local"
	consulNodeAddress = "<node address>"
)

// consul reads Consul service definitions, as the agent loads them from its
// config directory ({"service": {...}} or {"services": [...]}), or a bare
// JSON list of tags (one service named after the file), as healthy instances
// registered on the local agent.
func (c *checker) consul(path string, doc *yaml.Node) {
	root := docRoot(doc)
	var services []*yaml.Node
	switch {
	case root == nil:
		return
	case root.Kind == yaml.SequenceNode:
		services = []*yaml.Node{{Kind: yaml.MappingNode, Line: root.Line, Content: []*yaml.Node{
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
		port := 0
		if n := mapGet(svc, "port"); n != nil {
			var err error
			if port, err = strconv.Atoi(n.Value); err != nil || port < 0 || port > 65535 {
				c.add(Problem{File: path, Line: n.Line, Service: name, Key: "port", Severity: SeverityError, DisablesRouter: true,
					Message: fmt.Sprintf("port %q is not a port number: the service is skipped", n.Value)})
				continue
			}
		}
		var ls []labelLine
		var tags []string
		if t := mapGet(svc, "tags"); t != nil {
			for _, tag := range t.Content {
				tags = append(tags, tag.Value)
				for k, v := range labels.TagsToLabels([]string{tag.Value}, prefix) {
					shown, _, _ := strings.Cut(tag.Value, "=")
					ls = append(ls, labelLine{key: k, value: v, line: tag.Line, shown: shown})
				}
			}
		}
		id := scalar(mapGet(svc, "id"))
		if id == "" {
			id = name
		}
		inst := consulcatalog.Instance{Name: name, ID: id, Node: consulNode, NodeAddress: consulNodeAddress,
			Address: scalar(mapGet(svc, "address")), Port: port, Tags: tags, Status: "passing"}
		for n := 2; c.inputs[inst.SourceID()].file != ""; n++ {
			inst.ID = fmt.Sprintf("%s#%d", id, n) // the same ID twice: keep both apart
		}
		c.inputs[inst.SourceID()] = origin{file: path, fileIdx: c.files, service: name, line: svc.Line, labels: ls}
		c.instances = append(c.instances, inst)
	}
}

func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
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
		if n != nil && n.Kind == yaml.SequenceNode { // a list index
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(n.Content) {
				break
			}
			written = append(written, key)
			n = n.Content[i]
			line = n.Line
			continue
		}
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
