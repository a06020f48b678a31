package zookeeper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// zkServer is Debian's zkServer.sh (package zookeeper, which zookeeperd
// depends on).
const zkServer = "/usr/share/zookeeper/bin/zkServer.sh"

// server is a standalone ZooKeeper on a loopback port of its own, with its
// data on disk.
type server struct {
	dir  string
	port int
	proc *kvtest.Proc
	c    *zk.Conn
}

func startServer(t testing.TB) *server {
	t.Helper()
	if _, err := os.Stat(zkServer); err != nil {
		itest.Need(t, "zookeeper", errors.New("no "+zkServer+": apt-get install -y zookeeperd"))
	}
	if _, err := exec.LookPath("java"); err != nil {
		itest.Need(t, "zookeeper", errors.New("no java: apt-get install -y zookeeperd"))
	}
	s := &server{dir: t.TempDir(), port: kvtest.FreePort(t)}
	if err := s.start(s.port); err != nil {
		t.Fatal(err)
	}
	s.c = s.dial(t, s.port)
	t.Cleanup(func() {
		s.c.Close()
		s.proc.Stop()
	})
	return s
}

// start runs ZooKeeper on its data directory with the client port port and
// waits until a client gets a session.
func (s *server) start(port int) error {
	cfg := filepath.Join(s.dir, fmt.Sprintf("zoo-%d.cfg", port))
	conf := fmt.Sprintf("tickTime=200\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n", filepath.Join(s.dir, "data"), port)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := kvtest.StartProcEnv(append(os.Environ(), "ZOO_LOG_DIR="+s.dir), zkServer, "start-foreground", cfg)
	if err != nil {
		return err
	}
	s.proc = p
	return kvtest.Ready(p, 30*time.Second, func() error {
		c, _, err := zk.Connect([]string{"127.0.0.1:" + strconv.Itoa(port)}, 2*time.Second, zk.WithLogger(quiet{}))
		if err != nil {
			return err
		}
		defer c.Close()
		_, _, err = c.Exists("/")
		return err
	})
}

func (s *server) dial(t testing.TB, port int) *zk.Conn {
	c, _, err := zk.Connect([]string{"127.0.0.1:" + strconv.Itoa(port)}, 5*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// put creates the znode key (and its parents) or sets its data.
func put(t testing.TB, c *zk.Conn, key, value string) {
	t.Helper()
	p := "/" + key
	segs := strings.Split(key, "/")
	for i := 1; i < len(segs); i++ {
		parent := "/" + strings.Join(segs[:i], "/")
		if _, err := c.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("zkCli create %s: %v", parent, err)
		}
	}
	if _, err := c.Create(p, []byte(value), 0, zk.WorldACL(zk.PermAll)); err == nil {
		return
	} else if !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("zkCli create %s: %v", p, err)
	}
	if _, err := c.Set(p, []byte(value), -1); err != nil {
		t.Fatalf("zkCli set %s: %v", p, err)
	}
}

// deleteAll deletes the znode p and everything under it.
func deleteAll(t testing.TB, c *zk.Conn, p string) {
	t.Helper()
	kids, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		deleteAll(t, c, path.Join(p, k))
	}
	if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("zkCli deleteall %s: %v", p, err)
	}
}

func (s *server) Provider() string { return Name }

func (s *server) Flags() []string {
	return []string{"--providers.zooKeeper=true", "--providers.zooKeeper.endpoints=127.0.0.1:" + strconv.Itoa(s.port)}
}

func (s *server) Put(t testing.TB, key, value string) { t.Helper(); put(t, s.c, key, value) }

func (s *server) DeletePrefix(t testing.TB, prefix string) {
	t.Helper()
	deleteAll(t, s.c, "/"+strings.TrimRight(prefix, "/"))
}

func (s *server) Kill(t testing.TB) { s.proc.Kill() }

func (s *server) WhileDown(t testing.TB, change func(put func(k, v string))) {
	t.Helper()
	port := kvtest.FreePort(t)
	if err := s.start(port); err != nil {
		t.Fatalf("zookeeper on the same data, port %d: %v", port, err)
	}
	c := s.dial(t, port)
	change(func(k, v string) { put(t, c, k, v) })
	c.Close()
	s.proc.Stop()
}

func (s *server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(s.port); err != nil {
		t.Fatalf("restarting zookeeper: %v", err)
	}
}

// TestE2E is the acceptance scenario through the binary against a
// real ZooKeeper.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	kvtest.E2E(t, startServer(t))
}

// Znodes readable only with a digest: the route applies with the username
// and password; without them the refusal is an error in /api/providers.
func TestDigestAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	s := startServer(t)
	c := s.dial(t, s.port)
	defer c.Close()
	if err := c.AddAuth("digest", []byte("tollgate:s3cret")); err != nil {
		t.Fatal(err)
	}
	acl := zk.DigestACL(zk.PermAll, "tollgate", "s3cret")
	put := func(key, value string) {
		segs := strings.Split(key, "/")
		for i := 1; i <= len(segs); i++ {
			p := "/" + strings.Join(segs[:i], "/")
			var data []byte
			if i == len(segs) {
				data = []byte(value)
			}
			if _, err := c.Create(p, data, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatalf("create %s: %v", p, err)
			}
		}
	}
	ep := "--providers.zooKeeper.endpoints=127.0.0.1:" + strconv.Itoa(s.port)
	kvtest.Routed(t, Name, []string{ep, "--providers.zooKeeper.username=tollgate", "--providers.zooKeeper.password=s3cret"}, put)
	kvtest.Failing(t, Name, []string{ep}, "not authenticated")
}
