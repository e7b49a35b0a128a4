package reliability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// buildKillChild builds the child command once per test binary.
var buildKillChild = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "killchild-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "killchild")
	out, err := exec.Command("go", "build", "-o", bin, "./internal/killchild").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./internal/killchild: %v\n%s", err, out)
	}
	return bin, nil
})

// child is one run of the informer process.
type child struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *strings.Builder
	done   chan error
}

func startChild(t *testing.T, bin, conn, table, slot, dir string, final bool) *child {
	t.Helper()
	args := []string{"-table", table, "-slot", slot, "-dir", dir}
	if final {
		args = append(args, "-final")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KILLCHILD_CONN="+conn)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 100), stderr: &strings.Builder{}, done: make(chan error, 1)}
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return c.stderr.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		err := cmd.Wait()
		mu.Lock()
		defer mu.Unlock()
		c.done <- err
	}()
	return c
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestKillRestart is the kill fault: the informer runs as a child process
// (internal/killchild: a checkpointing informer over a Postgres table on a
// permanent slot) that is killed with SIGKILL at a random instant while
// writes go on (during a checkpoint write too: it saves every 20ms), and
// restarted from its checkpoint, several times; then a last child syncs,
// without listing, and its cache must equal the table, with no key's version backwards in
// any child's handler, and each start's checkpoint at or after the one
// before. Seeds (the -seed and -seeds flags) decide the writes and the
// kill instants.
func TestKillRestart(t *testing.T) {
	bin, err := buildKillChild()
	if err != nil {
		t.Fatal(err)
	}
	srv := harness.StartPostgres(t)
	for _, seed := range seeds() {
		t.Run(fmt.Sprintf("postgres/seed_%d", seed), func(t *testing.T) { killRestart(t, srv, bin, seed) })
	}
}

func killRestart(t *testing.T, srv *harness.Postgres, bin string, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	table := fmt.Sprintf("kill_%d_%d", seed, time.Now().UnixNano()%1e9)
	slot := table + "_slot"
	h := pgtest.New(t, srv, pgtest.Options{Table: table})
	t.Cleanup(func() { pgtest.DropSlot(context.Background(), srv.ConnString(), slot) })
	dir := t.TempDir()
	ctx := context.Background()
	version := int64(0)
	write := func() {
		key := "k" + strconv.Itoa(rnd.IntN(20))
		version++
		var err error
		if rnd.IntN(5) == 0 {
			_, err = h.Delete(ctx, key)
		} else {
			_, err = h.Put(ctx, key, version)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		write()
	}
	var lastLoaded int64
	check := func(c *child, what string) {
		t.Helper()
		if s := c.stderr.String(); strings.Contains(s, "BACKWARDS") {
			t.Errorf("%s: a handler saw a version go backwards:\n%s", what, s)
		}
	}
	loadedAt := func(k int, v string) {
		rv, _ := strconv.ParseInt(v, 10, 64)
		if rv < lastLoaded {
			t.Errorf("start %d loaded a checkpoint at %d, before the previous start's %d", k, rv, lastLoaded)
		}
		lastLoaded = rv
	}
	kills := 5
	for k := range kills {
		c := startChild(t, bin, srv.ConnString(), table, slot, dir, false)
		// Writes while the child starts; then, for half the kills (and the
		// first), until it has synced and written on; the kill comes after
		// a seeded number of writes and a seeded delay.
		n := rnd.IntN(30)
		delay := time.Duration(rnd.IntN(200)) * time.Millisecond
		afterSync := k == 0 || rnd.IntN(2) == 0
		for range n / 2 {
			write()
		}
		if afterSync {
			deadline := time.After(2 * time.Minute) // a wedged child, not a speed target
		wait:
			for {
				select {
				case line, ok := <-c.lines:
					if !ok {
						t.Fatalf("start %d: the child ended before syncing: %v\n%s", k, <-c.done, c.stderr)
					}
					if v, found := strings.CutPrefix(line, "loaded "); found {
						loadedAt(k, v)
					}
					if line == "synced" {
						break wait
					}
				case <-deadline:
					t.Fatalf("start %d: the child did not sync:\n%s", k, c.stderr)
				}
			}
		}
		for range n - n/2 {
			write()
		}
		time.Sleep(delay)
		c.cmd.Process.Kill()
		<-c.done
		for line := range c.lines {
			if v, found := strings.CutPrefix(line, "loaded "); found {
				loadedAt(k, v)
			}
		}
		check(c, fmt.Sprintf("start %d", k))
		for range rnd.IntN(10) {
			write()
		}
	}
	c := startChild(t, bin, srv.ConnString(), table, slot, dir, true)
	var state map[string]int64
	loaded := false
	for line := range c.lines {
		if strings.HasPrefix(line, "loaded ") {
			loaded = true
		}
		if line != "lists 0" && strings.HasPrefix(line, "lists ") {
			t.Errorf("the final start from a checkpoint listed (%s); the slot should have kept every change since\n%s", line, c.stderr)
		}
		if s, ok := strings.CutPrefix(line, "state "); ok {
			if err := json.Unmarshal([]byte(s), &state); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-c.done; err != nil {
		t.Fatalf("final start: %v\n%s", err, c.stderr)
	}
	check(c, "final start")
	if !loaded {
		t.Errorf("the final start did not load a checkpoint:\n%s", c.stderr)
	}
	want, err := h.Truth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := informertest.Diff("cache", state, want); len(d) > 0 {
		t.Errorf("after %d kills the cache differs from the table:\n%s\nchild's stderr:\n%s", kills, strings.Join(d, "\n"), c.stderr)
	}
}
