package check

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/provider/swarm"
)

// stackFile is what the differential test reads of a stack file, on its
// own: the stack name, and per service its deploy section, networks and
// published ports.
type stackFile struct {
	Name     string `yaml:"name"`
	Services map[string]struct {
		Deploy *struct {
			Labels       yaml.Node `yaml:"labels"`
			Replicas     *int      `yaml:"replicas"`
			Mode         string    `yaml:"mode"`
			EndpointMode string    `yaml:"endpoint_mode"`
		} `yaml:"deploy"`
		Networks yaml.Node   `yaml:"networks"`
		Ports    []yaml.Node `yaml:"ports"`
	} `yaml:"services"`
	Networks map[string]*struct {
		Name     string `yaml:"name"`
		External bool   `yaml:"external"`
	} `yaml:"networks"`
}

// stackServices are the Swarm services `docker stack deploy` would create
// for path, as the manager lists them once every task runs: one task per
// replica (tasks.<service> on each network), the virtual IP at <service>.
func stackServices(t *testing.T, path string) []swarm.Service {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sf stackFile
	if err := yaml.Unmarshal(b, &sf); err != nil {
		t.Fatal(err)
	}
	stack := sf.Name
	if stack == "" {
		abs, _ := filepath.Abs(path)
		stack = strings.ToLower(filepath.Base(filepath.Dir(abs)))
	}
	var out []swarm.Service
	for name, svc := range sf.Services {
		if svc.Deploy == nil || svc.Deploy.Labels.Kind == 0 {
			continue
		}
		lbls := map[string]string{}
		var list []string
		var m map[string]string
		if svc.Deploy.Labels.Decode(&list) == nil {
			for _, l := range list {
				k, v, _ := strings.Cut(l, "=")
				lbls[strings.TrimSpace(k)] = v
			}
		} else if svc.Deploy.Labels.Decode(&m) == nil {
			for k, v := range m {
				lbls[k] = v
			}
		}
		var nets []string
		var netList []string
		var netMap map[string]any
		if svc.Networks.Decode(&netList) != nil && svc.Networks.Decode(&netMap) == nil {
			for n := range netMap {
				netList = append(netList, n)
			}
		}
		if len(netList) == 0 {
			netList = []string{"default"}
		}
		for _, n := range netList {
			switch def := sf.Networks[n]; {
			case def != nil && def.Name != "":
				nets = append(nets, def.Name)
			case def != nil && def.External:
				nets = append(nets, n)
			default:
				nets = append(nets, stack+"_"+n)
			}
		}
		s := swarm.Service{ID: name, Name: stack + "_" + name, Labels: lbls, EndpointMode: swarm.ModeVIP}
		for _, p := range svc.Ports {
			var long struct{ Mode string }
			if p.Kind != yaml.MappingNode || p.Decode(&long) != nil || long.Mode != "host" {
				s.Ingress = "ingress"
			}
		}
		if s.Ingress != "" {
			nets = append(nets, s.Ingress)
		}
		on := func(host string) map[string]string {
			m := map[string]string{}
			for _, n := range nets {
				m[n] = host
			}
			return m
		}
		if svc.Deploy.EndpointMode == "dnsrr" {
			s.EndpointMode = swarm.ModeDNSRR
		} else {
			s.VirtualIPs = on(name)
		}
		replicas := 1
		if svc.Deploy.Mode == "global" {
			s.Global = true
		} else if svc.Deploy.Replicas != nil {
			replicas = *svc.Deploy.Replicas
		}
		for i := range replicas {
			s.Tasks = append(s.Tasks, swarm.Task{ID: fmt.Sprint(i), Slot: i + 1, State: swarm.TaskRunning, Networks: on("tasks." + name)})
		}
		out = append(out, s)
	}
	return out
}

// The shipped stack example checks clean, as `docker stack deploy` runs it
// and with the defaults.
func TestShippedStackPasses(t *testing.T) {
	path := filepath.Join("..", "examples", "swarm", "stack.yml")
	for _, opts := range []Options{{ExposedByDefault: false}, DefaultOptions()} {
		rep := Files([]string{path}, opts)
		if rep.Failed() || len(rep.Problems) != 0 {
			t.Fatalf("examples/swarm/stack.yml has problems: %+v", rep.Problems)
		}
		if rep.Status.Routers["limited@swarm"] != "enabled" || rep.Status.Middlewares["test-inflightconn@swarm"] != "enabled" {
			t.Fatalf("statuses %+v, want limited@swarm and test-inflightconn@swarm enabled", rep.Status)
		}
		if s := rep.TCP.Services["limited@swarm"]; s == nil || len(s.LoadBalancer.Servers) != 1 || s.LoadBalancer.Servers[0].Address != "tasks.limited:7000" {
			t.Fatalf("service limited@swarm = %+v, want the tasks at tasks.limited:7000", s)
		}
		if len(rep.TCP.Routers) != 1 {
			t.Fatalf("routers %v: the stack's container labels must give none", rep.TCP.Routers)
		}
	}
}

// deploy.labels are read as the Swarm provider reads them, and their
// problems are placed on the label's line with the compose service.
func TestStackProblemsAreLocated(t *testing.T) {
	path := filepath.Join(goldenDir, "stack-services.yml")
	rep := Files([]string{path}, DefaultOptions())
	type where struct {
		service, key string
		line         int
		severity     string
	}
	var got []where
	for _, p := range rep.Problems {
		got = append(got, where{p.Service, p.Key, p.Line, p.Severity})
	}
	want := []where{
		{"cache", "traefik.swarm.network", 24, SeverityWarning},
		{"noport", "", 36, SeverityError},
		{"typo", "traefik.swarm.lbswram", 46, SeverityError},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("problems at %+v, want %+v\n%+v", got, want, rep.Problems)
	}
	for _, p := range rep.Problems {
		if p.Service == "cache" && !strings.Contains(p.Message, `"shop_backend"?`) {
			t.Errorf("the network warning does not name the stack's network: %s", p.Message)
		}
	}
	for name, want := range map[string]string{
		"db@swarm":    "tasks.db:5432",
		"cache@swarm": "tasks.cache:6379",
		"queue@swarm": "queue:5672", // lbswarm: the virtual IP, on shop_backend, not on ingress
	} {
		s := rep.TCP.Services[name]
		if s == nil || len(s.LoadBalancer.Servers) != 1 || s.LoadBalancer.Servers[0].Address != want {
			t.Errorf("service %s = %+v, want one server %s", name, s, want)
		}
	}
	if _, ok := rep.TCP.Routers["idle@swarm"]; ok {
		t.Errorf("a service with 0 replicas is routed")
	}
}
