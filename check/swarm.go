package check

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/provider/swarm"
)

// Stack files: the deploy section of a compose service is what `docker
// stack deploy` makes a Swarm service of, and its deploy.labels are the
// labels the Swarm provider reads (container labels are the Docker
// provider's). Each service with deploy.labels becomes the swarm.Service
// the manager would list once the stack runs, built by swarm.Build:
//
//   - named <stack>_<service>, the stack being the file's `name:`, else its
//     folder (as for compose; `docker stack deploy` takes it on the command
//     line);
//   - replicated with deploy.replicas running tasks (1 when absent), or
//     global (deploy.mode: global) with one;
//   - on the networks of its `networks:` (list or map), named as the stack
//     names them: <stack>_<network>, or the network's `name:`, or the
//     network itself when external; <stack>_default without any; plus the
//     routing mesh (ingress) when it publishes a port in ingress mode;
//   - a task is reached at tasks.<service> and the virtual IP (lbswarm) at
//     <service>, the names Swarm's DNS gives them on the stack's networks;
//     deploy.endpoint_mode: dnsrr has no virtual IP.

// swarmNoun is what check calls one input of the Swarm provider.
const swarmNoun = "Swarm service"

// stackService adds the Swarm service of compose service name (declared at
// keyLine) when it has deploy.labels.
func (c *checker) stackService(path, stack string, root *yaml.Node, name string, keyLine int, svc *yaml.Node) {
	deploy := mapGet(svc, "deploy")
	if deploy == nil || mapGet(deploy, "labels") == nil {
		return
	}
	ls, err := composeLabels(mapGet(deploy, "labels"))
	if err != nil {
		c.add(Problem{File: path, Line: keyLine, Service: name, Severity: SeverityError, DisablesRouter: true, Message: "deploy." + err.Error()})
		return
	}
	lbls := make(map[string]string, len(ls))
	for _, l := range ls {
		lbls[l.key] = l.value
	}
	id := fmt.Sprintf("%s#swarm%d", path, len(c.services))
	c.inputs[id] = origin{file: path, fileIdx: c.files, service: name, line: keyLine, labels: ls}

	s := swarm.Service{ID: id, Name: stack + "_" + name, Labels: lbls, EndpointMode: swarm.ModeVIP}
	if strings.EqualFold(scalar(mapGet(deploy, "endpoint_mode")), swarm.ModeDNSRR) {
		s.EndpointMode = swarm.ModeDNSRR
	}
	networks := stackNetworks(stack, root, svc)
	if publishesOnIngress(svc) {
		s.Ingress = "ingress"
		networks = append(networks, s.Ingress)
	}
	at := func(host string) map[string]string {
		m := make(map[string]string, len(networks))
		for _, n := range networks {
			m[n] = host
		}
		return m
	}
	if s.EndpointMode == swarm.ModeVIP {
		s.VirtualIPs = at(name)
	}
	tasks := 1
	switch {
	case strings.EqualFold(scalar(mapGet(deploy, "mode")), "global"):
		s.Global = true
	case mapGet(deploy, "replicas") != nil:
		if n, err := strconv.Atoi(scalar(mapGet(deploy, "replicas"))); err == nil && n >= 0 {
			tasks = n
		}
	}
	for i := range tasks {
		slot := i + 1
		if s.Global {
			slot = 0
		}
		s.Tasks = append(s.Tasks, swarm.Task{ID: fmt.Sprintf("%s.%d", s.Name, slot), Slot: slot, State: swarm.TaskRunning, Networks: at("tasks." + name)})
	}
	c.services = append(c.services, s)
}

// stackNetworks are the names `docker stack deploy` gives the networks of
// compose service svc.
func stackNetworks(stack string, root, svc *yaml.Node) []string {
	var keys []string
	switch n := mapGet(svc, "networks"); {
	case n == nil:
	case n.Kind == yaml.SequenceNode:
		for _, e := range n.Content {
			keys = append(keys, e.Value)
		}
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			keys = append(keys, n.Content[i].Value)
		}
	}
	if len(keys) == 0 {
		keys = []string{"default"}
	}
	top := mapGet(root, "networks")
	var out []string
	for _, k := range keys {
		def := mapGet(top, k)
		switch name := scalar(mapGet(def, "name")); {
		case name != "":
			out = append(out, name)
		case isTrue(mapGet(def, "external")):
			out = append(out, k)
		default:
			out = append(out, stack+"_"+k)
		}
	}
	return out
}

// isTrue reads a YAML boolean (external: true), or an external mapping
// (external: {name: x}, the old form).
func isTrue(n *yaml.Node) bool {
	if n == nil {
		return false
	}
	if n.Kind == yaml.MappingNode {
		return true
	}
	b, _ := strconv.ParseBool(n.Value)
	return b
}

// publishesOnIngress reports whether svc publishes a port through the
// routing mesh: any ports entry but the long form with mode: host.
func publishesOnIngress(svc *yaml.Node) bool {
	ports := mapGet(svc, "ports")
	if ports == nil || ports.Kind != yaml.SequenceNode {
		return false
	}
	for _, p := range ports.Content {
		if p.Kind != yaml.MappingNode || !strings.EqualFold(scalar(mapGet(p, "mode")), "host") {
			return true
		}
	}
	return false
}
