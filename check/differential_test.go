package check

// The differential test of issue 11: every label and tag input goes through
// the provider's own path (its plain input, built by hand here, -> Build ->
// the watcher's Merge -> proxy.Compile, as the running proxy sees it) and
// through `tollgate check` (the file -> check's parsing -> the same Build ->
// Merge -> Compile). Both must give the same configuration, the same status
// for every resource and the same problems.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/tollgate-proxy/tollgate/config"
	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/middleware"
	"github.com/tollgate-proxy/tollgate/provider"
	"github.com/tollgate-proxy/tollgate/provider/consulcatalog"
	"github.com/tollgate-proxy/tollgate/provider/docker"
	"github.com/tollgate-proxy/tollgate/provider/swarm"
	"github.com/tollgate-proxy/tollgate/proxy"
)

// finding is a problem as both paths can state it.
type finding struct {
	Resource, Severity, Message string
	DisablesRouter              bool
}

// view is what one path says about its inputs.
type view struct {
	TCP      *config.TCPConfiguration
	Status   Statuses
	Findings []finding
	Keys     map[string]string // message -> the label or tag key it names (build problems)
}

// providerView runs the providers' own path: their builds, the watcher's
// Merge, the compiler. noun is check's word for a skipped input of each
// provider (the only thing check adds to a build problem's message).
func providerView(containers []docker.Container, instances []consulcatalog.Instance, opts Options) (view, []string) {
	return providerViewWith(containers, instances, nil, opts)
}

// providerViewWith is providerView with the Swarm services of stack files.
func providerViewWith(containers []docker.Container, instances []consulcatalog.Instance, services []swarm.Service, opts Options) (view, []string) {
	v := view{Keys: map[string]string{}}
	configs := map[string]*config.Dynamic{}
	add := func(prov, noun string, res provider.Result) {
		configs[prov] = res.Configuration
		for _, p := range res.Problems {
			f := finding{Severity: string(p.Severity), Message: p.Message, DisablesRouter: p.DisablesRouter}
			if p.Skipped {
				f.Message += ": the " + noun + " is skipped"
			} else if p.Resource.Kind != "" {
				f.Resource = provider.Qualify(p.Resource.Name, prov)
			}
			if p.Key != "" {
				v.Keys[f.Message] = strings.ToLower(p.Key)
			}
			v.Findings = append(v.Findings, f)
		}
	}
	if len(containers) > 0 {
		add(docker.Name, "container", docker.Build(containers, docker.Options{ExposedByDefault: opts.ExposedByDefault}))
	}
	if len(services) > 0 {
		add(swarm.Name, swarmNoun, swarm.Build(services, swarm.Options{ExposedByDefault: opts.ExposedByDefault}))
	}
	if len(instances) > 0 {
		prefix := opts.Prefix
		if prefix == "" {
			prefix = "traefik"
		}
		add(consulcatalog.Name, "service", consulcatalog.Build(instances, consulcatalog.Options{
			Prefix: prefix, ExposedByDefault: opts.ExposedByDefault, StrictChecks: consulcatalog.DefaultStrictChecks(),
		}))
	}
	v.TCP = provider.Merge(configs)

	eps := namedEntryPoints(v.TCP)
	st := proxy.NewState(zerolog.Nop(), proxy.StateOptions{Stores: middleware.StoresOf(namedStores(v.TCP))}) // the static configuration defines the stores named
	st.Close()
	_, rt := proxy.Compile(v.TCP, eps, st, zerolog.Nop())
	v.Status = Statuses{Routers: map[string]string{}, Services: map[string]string{}, Middlewares: map[string]string{}}
	for name, ri := range rt.Routers {
		v.Status.Routers[name] = ri.Status
		for _, msg := range ri.Err {
			v.Findings = append(v.Findings, finding{Resource: name, Severity: severityOf(ri.Status), Message: msg, DisablesRouter: ri.Status == proxy.StatusDisabled})
		}
	}
	for name, si := range rt.Services {
		v.Status.Services[name] = si.Status
		for _, msg := range si.Err {
			v.Findings = append(v.Findings, finding{Resource: name, Severity: severityOf(si.Status), Message: msg})
		}
	}
	for name, mi := range rt.Middlewares {
		v.Status.Middlewares[name] = mi.Status
		for _, msg := range mi.Err {
			v.Findings = append(v.Findings, finding{Resource: name, Severity: severityOf(mi.Status), Message: msg})
		}
	}
	return v, eps
}

func severityOf(status string) string {
	if status == proxy.StatusDisabled {
		return SeverityError
	}
	return SeverityWarning
}

// checkView runs `tollgate check` on files.
func checkView(t *testing.T, files []string, opts Options) view {
	t.Helper()
	rep := Files(files, opts)
	v := view{TCP: rep.TCP, Status: rep.Status, Keys: map[string]string{}}
	for _, p := range rep.Problems {
		if p.File == "" {
			t.Errorf("problem without a file: %+v", p)
		}
		v.Findings = append(v.Findings, finding{Resource: p.Resource, Severity: p.Severity, Message: p.Message, DisablesRouter: p.DisablesRouter})
		if p.Key != "" {
			v.Keys[p.Message] = strings.ToLower(p.Key)
		}
	}
	return v
}

// sameViews compares what matters: configurations as JSON (nil and empty
// sections alike), statuses, and the findings as multisets. A build problem
// that names a key must be placed on that key by check.
func sameViews(t *testing.T, want, got view) {
	t.Helper()
	w, _ := json.MarshalIndent(want.TCP, "", "  ")
	g, _ := json.MarshalIndent(got.TCP, "", "  ")
	if string(w) != string(g) {
		t.Errorf("configuration:\nprovider %s\ncheck    %s", w, g)
	}
	if !reflect.DeepEqual(want.Status, got.Status) {
		t.Errorf("status:\nprovider %+v\ncheck    %+v", want.Status, got.Status)
	}
	sortFindings := func(fs []finding) []finding {
		out := append([]finding(nil), fs...)
		sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i]) < fmt.Sprint(out[j]) })
		return out
	}
	if wf, gf := sortFindings(want.Findings), sortFindings(got.Findings); !reflect.DeepEqual(wf, gf) {
		t.Errorf("problems:\nprovider %+v\ncheck    %+v", wf, gf)
	}
	for msg, key := range want.Keys {
		if got.Keys[msg] != key {
			t.Errorf("problem %q: check places it on %q, the build names %q", msg, got.Keys[msg], key)
		}
	}
}

// labelContainer is the container check reads a label file as: running,
// named after the file and reachable under that name, image ports unknown.
func labelContainer(name string, lbls map[string]string) docker.Container {
	return docker.Container{ID: name, Name: name, Labels: lbls, State: "running",
		Networks: map[string]string{"default": provider.Normalize(name)}, ImagePortsUnknown: true}
}

func TestDifferentialLabelFiles(t *testing.T) {
	var files []string
	for _, dir := range []string{filepath.Join("..", "testdata", "labels"), goldenDir} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.labels"))
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("only %d label fixtures", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			name := strings.TrimSuffix(filepath.Base(path), ".labels")
			for _, opts := range []Options{DefaultOptions(), {ExposedByDefault: false, Prefix: "traefik"}} {
				want, eps := providerView([]docker.Container{labelContainer(name, itest.ReadLabels(t, path))}, nil, opts)
				opts.EntryPoints = eps
				sameViews(t, want, checkView(t, []string{path}, opts))
			}
		})
	}
}

// composeFile is what the differential test reads of a compose file, on its
// own: the project name, and per service its labels and listed ports.
type composeFile struct {
	Name     string `yaml:"name"`
	Services map[string]struct {
		Labels yaml.Node   `yaml:"labels"`
		Expose []string    `yaml:"expose"`
		Ports  []yaml.Node `yaml:"ports"`
	} `yaml:"services"`
}

// composeContainers are the containers compose would create for path.
func composeContainers(t *testing.T, path string) []docker.Container {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	project := cf.Name
	if project == "" {
		abs, _ := filepath.Abs(path)
		project = strings.ToLower(filepath.Base(filepath.Dir(abs)))
	}
	var out []docker.Container
	for name, svc := range cf.Services {
		lbls := map[string]string{}
		var list []string
		var m map[string]string
		if svc.Labels.Decode(&list) == nil {
			for _, l := range list {
				k, v, _ := strings.Cut(l, "=")
				lbls[strings.TrimSpace(k)] = v
			}
		} else if svc.Labels.Decode(&m) == nil {
			for k, v := range m {
				lbls[k] = v
			}
		}
		lbls[docker.LabelComposeProject], lbls[docker.LabelComposeService] = project, name
		var ports []docker.Port
		listed := slices.Clone(svc.Expose)
		for _, p := range svc.Ports {
			if target := p.Value; p.Kind == yaml.MappingNode {
				var long struct{ Target string }
				_ = p.Decode(&long)
				listed = append(listed, long.Target)
			} else {
				listed = append(listed, target)
			}
		}
		for _, p := range listed {
			p = p[strings.LastIndex(p, ":")+1:]
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("%s: port %q: the test reads plain ports only", path, p)
			}
			ports = append(ports, docker.Port{Port: n, Proto: "tcp"})
		}
		out = append(out, docker.Container{ID: name, Name: name, Labels: lbls, State: "running",
			Networks: map[string]string{"default": name}, Ports: ports, ImagePortsUnknown: true})
	}
	return out
}

// Compose and stack files: their labels are containers of the Docker
// provider, their deploy.labels services of the Swarm provider.
func TestDifferentialComposeFiles(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "compose-*.yml"))
	stacks, _ := filepath.Glob(filepath.Join(goldenDir, "stack-*.yml"))
	files = append(append(files, stacks...), filepath.Join("..", "docker-compose.yml"), filepath.Join("..", "examples", "swarm", "stack.yml"))
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			for _, opts := range []Options{DefaultOptions(), {ExposedByDefault: false, Prefix: "traefik"}} {
				want, eps := providerViewWith(composeContainers(t, path), nil, stackServices(t, path), opts)
				opts.EntryPoints = eps
				sameViews(t, want, checkView(t, []string{path}, opts))
			}
		})
	}
}

// definition is one Consul service definition (the agent's format).
type definition struct {
	ID      string   `json:"id,omitempty"`
	Name    string   `json:"name"`
	Address string   `json:"address,omitempty"`
	Port    int      `json:"port,omitempty"`
	Tags    []string `json:"tags,omitempty"`
}

// agentInstance is the instance the local agent registers for d.
func agentInstance(d definition) consulcatalog.Instance {
	id := d.ID
	if id == "" {
		id = d.Name
	}
	return consulcatalog.Instance{Name: d.Name, ID: id, Node: consulNode, NodeAddress: consulNodeAddress,
		Address: d.Address, Port: d.Port, Tags: d.Tags, Status: "passing"}
}

func writeDefinitions(t *testing.T, defs []definition) string {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{"services": defs}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "services.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDifferentialConsulDefinitions(t *testing.T) {
	path := filepath.Join(goldenDir, "consul-services.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Services []definition }
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	var insts []consulcatalog.Instance
	for _, d := range file.Services {
		insts = append(insts, agentInstance(d))
	}
	want, eps := providerView(nil, insts, DefaultOptions())
	sameViews(t, want, checkView(t, []string{path}, Options{EntryPoints: eps, ExposedByDefault: true, Prefix: "traefik"}))
}

// The catalog fixtures of the provider's golden test, registered as Consul
// service definitions on one agent: each instance at its own address (else
// its node's), healthy. Constraints and strictChecks are provider options
// check does not have; they are left out on both sides.
func TestDifferentialCatalogFixtures(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "consulcatalog", "*.json"))
	n := 0
	for _, path := range files {
		if strings.HasSuffix(path, ".golden.json") {
			continue
		}
		n++
		t.Run(filepath.Base(path), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var fixture struct {
				Options *struct {
					Prefix           *string
					ExposedByDefault *bool
				}
				Instances []consulcatalog.Instance
			}
			if err := json.Unmarshal(b, &fixture); err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions()
			if o := fixture.Options; o != nil {
				if o.Prefix != nil {
					opts.Prefix = *o.Prefix
				}
				if o.ExposedByDefault != nil {
					opts.ExposedByDefault = *o.ExposedByDefault
				}
			}
			var defs []definition
			var insts []consulcatalog.Instance
			for _, in := range fixture.Instances {
				d := definition{ID: in.ID, Name: in.Name, Address: in.Address, Port: in.Port, Tags: in.Tags}
				if d.Address == "" {
					d.Address = in.NodeAddress
				}
				defs = append(defs, d)
				insts = append(insts, agentInstance(d))
			}
			want, eps := providerView(nil, insts, opts)
			opts.EntryPoints = eps
			sameViews(t, want, checkView(t, []string{writeDefinitions(t, defs)}, opts))
		})
	}
	if n < 5 {
		t.Fatalf("only %d catalog fixtures", n)
	}
}
