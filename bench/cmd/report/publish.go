package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Markers of the parts publish rewrites: the list of runs in
// bench/results/README.md, and the latest table in bench/README.md.
const (
	runsMarker        = "<!-- runs: newest first; bench/run.sh adds each run below this line -->"
	latestBeginMarker = "<!-- latest run: begin (bench/run.sh rewrites this part after a full run) -->"
	latestEndMarker   = "<!-- latest run: end -->"
)

// run is what publish knows of one run, from its env.txt.
type run struct {
	when     time.Time
	model    string // the CPU model, as /proc/cpuinfo names it
	settings string // the LIMIT=... REPS=... peers: ... line
}

// name is the run's results file name without .md: date, time and host.
func (r run) name(host string) string {
	return r.when.UTC().Format("2006-01-02-1504") + "-" + host
}

// title is the run's heading.
func (r run) title() string {
	return fmt.Sprintf("%s UTC, %s", r.when.UTC().Format("2006-01-02 15:04"), r.model)
}

var (
	envDate  = regexp.MustCompile(`(?m)^date: (\S+)`)
	envModel = regexp.MustCompile(`(?m)^host: .*?CPUs \((.+)\)\s*$`)
	envSets  = regexp.MustCompile(`(?m)^(LIMIT=.*)$`)
)

// parseEnv reads run.sh's env.txt.
func parseEnv(env string) (run, error) {
	m := envDate.FindStringSubmatch(env)
	if m == nil {
		return run{}, errors.New("env.txt has no date: line")
	}
	when, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		return run{}, fmt.Errorf("env.txt date: %v", err)
	}
	r := run{when: when, model: "unknown CPU"}
	if m := envModel.FindStringSubmatch(env); m != nil {
		r.model = strings.TrimSpace(m[1])
	}
	if m := envSets.FindStringSubmatch(env); m != nil {
		r.settings = strings.TrimSpace(m[1])
	}
	return r, nil
}

var (
	modelNoise = regexp.MustCompile(`(?i)\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$|\b\d+-core\b`)
	nonAlnum   = regexp.MustCompile(`[^a-z0-9]+`)
)

// hostLabel is a file-name label for a CPU model: "AMD EPYC 7B13" ->
// "amd-epyc-7b13", "Intel(R) Xeon(R) CPU @ 2.20GHz" -> "intel-xeon".
func hostLabel(model string) string {
	s := strings.ToLower(modelNoise.ReplaceAllString(model, " "))
	s = strings.Trim(nonAlnum.ReplaceAllString(s, "-"), "-")
	if s == "" {
		return "host"
	}
	return s
}

// tableOf returns the metrics table of table.md and the legend paragraph
// after it.
func tableOf(md string) (string, error) {
	lines := strings.Split(md, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "| metric |") {
			start = i
			break
		}
	}
	if start < 0 {
		return "", errors.New("table.md has no | metric | table")
	}
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "|") {
		end++
	}
	out := strings.Join(lines[start:end], "\n") + "\n"
	// The legend: the paragraph right after the table.
	if end+1 < len(lines) && strings.HasPrefix(lines[end+1], "Each cell:") {
		out += "\n" + lines[end+1] + "\n"
	}
	return out, nil
}

// publishRun writes the run's results file into resultsDir, lists it in
// resultsDir/README.md and, when latest, puts its table into readme as the
// latest one. It returns the results file's path.
func publishRun(tableMD, env, resultsDir, readme, host string, latest bool) (string, error) {
	r, err := parseEnv(env)
	if err != nil {
		return "", err
	}
	if host == "" {
		host = hostLabel(r.model)
	}
	name := r.name(host)
	path := filepath.Join(resultsDir, name+".md")
	for n := 2; ; n++ {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
		path = filepath.Join(resultsDir, fmt.Sprintf("%s-%d.md", name, n))
	}
	name = strings.TrimSuffix(filepath.Base(path), ".md")
	body := fmt.Sprintf("# %s\n\n<!-- written by bench/run.sh (bench/cmd/report publish) -->\n%s", r.title(), tableMD)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		return "", err
	}

	index := filepath.Join(resultsDir, "README.md")
	b, err := os.ReadFile(index)
	if err != nil {
		return "", fmt.Errorf("%v: the results index must exist, with the line %s", err, runsMarker)
	}
	entry := fmt.Sprintf("- [%s](%s.md)", r.title(), name)
	if r.settings != "" {
		entry += ": " + r.settings
	}
	i := bytes.Index(b, []byte(runsMarker))
	if i < 0 {
		return "", fmt.Errorf("%s has no line %s", index, runsMarker)
	}
	i += len(runsMarker)
	out := append(append(append([]byte{}, b[:i]...), []byte("\n"+entry)...), b[i:]...)
	if err := os.WriteFile(index, out, 0o644); err != nil {
		return "", err
	}

	if !latest {
		return path, nil
	}
	table, err := tableOf(tableMD)
	if err != nil {
		return "", err
	}
	rb, err := os.ReadFile(readme)
	if err != nil {
		return "", err
	}
	s := string(rb)
	bi, ei := strings.Index(s, latestBeginMarker), strings.Index(s, latestEndMarker)
	if bi < 0 || ei < bi {
		return "", fmt.Errorf("%s has no %s ... %s part", readme, latestBeginMarker, latestEndMarker)
	}
	rel, err := filepath.Rel(filepath.Dir(readme), path)
	if err != nil {
		rel = path
	}
	part := fmt.Sprintf("%s\n**%s** (%s; the whole run, with its environment and details: [%s](%s)):\n\n%s",
		latestBeginMarker, r.title(), r.settings, filepath.ToSlash(rel), filepath.ToSlash(rel), table)
	s = s[:bi] + part + s[ei:]
	return path, os.WriteFile(readme, []byte(s), 0o644)
}

// publish is `report publish`: see publishRun.
func publish(args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	table := fs.String("table", "", "the run's table.md")
	env := fs.String("env", "", "the run's env.txt")
	results := fs.String("results", "", "the committed results folder (bench/results)")
	readme := fs.String("readme", "", "bench/README.md, whose latest table is replaced when -latest")
	host := fs.String("host", "", "host label in the file name (default: from the CPU model)")
	latest := fs.Bool("latest", false, "a full run: its table becomes bench/README.md's latest table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *table == "" || *env == "" || *results == "" || (*latest && *readme == "") {
		return errors.New("publish: -table, -env and -results are needed (and -readme with -latest)")
	}
	tb, err := os.ReadFile(*table)
	if err != nil {
		return err
	}
	eb, err := os.ReadFile(*env)
	if err != nil {
		return err
	}
	path, err := publishRun(string(tb), string(eb), *results, *readme, *host, *latest)
	if err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}
