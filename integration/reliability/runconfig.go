package reliability

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/conformance"
)

// What a run is given and gives back: the harness an adapter provides,
// the run's configuration and result, and the collectors Run fills.

// Obj is a value an adapter's harness may store for the suite: its key and
// the version the workload gave it. Harnesses are free to store their own
// type; the runner only reads versions through Harness.Version.
type Obj struct {
	K string `json:"k" db:"k"`
	V int64  `json:"v" db:"v"`
}

// The runner's own faults, beside the harness's (conformance.Cut, Pause,
// Restart, Expire, Freeze): they happen on the handler side in every run.
const (
	Requeue conformance.Fault = "requeue" // a handler failed and its key was requeued
	Panic   conformance.Fault = "panic"   // a handler panicked (recovered and reported by the informer)
)

// Harness is what a run needs from an adapter: a conformance.Harness that
// can also read the source directly (Truth) and break the path between its
// ListerWatcher and the server (Faults).
type Harness[T any] interface {
	conformance.Harness[T]
	conformance.Truth
	conformance.Faults
}

// MakeHarness starts one run's server, clients and proxy and returns the
// harness over them; rnd may pick a variant (a permanent or temporary
// Postgres slot, a KV bucket's history depth), described by the returned
// string. The harness must implement conformance.Truth and
// conformance.Faults. Everything it registers with t.Cleanup is closed when
// the run ends, before the run checks that no goroutine is left.
type MakeHarness[T any] func(t testing.TB, rnd *rand.Rand) (h conformance.Harness[T], variant string)

// Config sizes a run. The zero value of each field means its default.
type Config struct {
	Keys          int           // key space; default 16
	Ops           int           // writes; default 60
	FaultsPerKind int           // faults of each kind the harness supports; default 1
	FailRate      float64       // chance that the WorkQueue handler fails; default 0.3
	MaxPause      time.Duration // longest pause between writes; default 20ms
	Settle        time.Duration // deadline for convergence after the workload; default 3m
	// AuditPeriod is the consistency audit's period (see AuditCounts);
	// default DefaultAuditPeriod, negative: no audit.
	AuditPeriod time.Duration
}

// DefaultAuditPeriod is Config.AuditPeriod's default. Runs last 1 to 15
// seconds and inject their faults within the first second or two: with a
// period of a second the fastest adapters (memory, nats) audited only after
// their faults; a quarter second audits several times during them, at the
// cost of a 16-key read each (no measurable wall time).
const DefaultAuditPeriod = 250 * time.Millisecond

func (c Config) withDefaults() Config {
	if c.Keys <= 0 {
		c.Keys = 16
	}
	if c.Ops <= 0 {
		c.Ops = 60
	}
	if c.FaultsPerKind <= 0 {
		c.FaultsPerKind = 1
	}
	if c.FailRate <= 0 {
		c.FailRate = 0.3
	}
	if c.MaxPause <= 0 {
		c.MaxPause = 20 * time.Millisecond
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Minute
	}
	if c.AuditPeriod == 0 {
		c.AuditPeriod = DefaultAuditPeriod
	}
	return c
}

// Result is what one run did and found.
type Result struct {
	Adapter     string
	Variant     string
	Seed        uint64
	Config      Config // as run, defaults filled in
	Ops         int
	Faults      map[conformance.Fault]int
	Relists     int      // successful relists after the first list
	Restarts    int      // watches that ended with an error (expired included)
	Divergences []string // empty when the run passed
	Elapsed     time.Duration
	// Converge holds, per harness fault kind, the time from the fault's
	// heal (its end returned, or Inject when it has no end) to WaitFor of
	// the head read then returning: how long the informer took to catch up.
	// Measured, never asserted. A fault whose informer had not caught up
	// when the next fault was injected is not in Converge but in
	// Overlapped: its time includes the next fault's outage (an apiserver
	// restarting for ten seconds), which is that fault's to account for.
	Converge map[conformance.Fault][]time.Duration
	// Overlapped holds, per fault kind, the same times for faults whose
	// convergence another fault's injection interrupted.
	Overlapped map[conformance.Fault][]time.Duration
	// Audit is what the consistency audit said during the run.
	Audit AuditCounts
}

// Failure describes a divergent run with the command that replays it.
func (r Result) Failure() string {
	return fmt.Sprintf("%s seed %d (%s): %d divergence(s):\n  %s\nreplay: %s",
		r.Adapter, r.Seed, r.Variant, len(r.Divergences), strings.Join(r.Divergences, "\n  "), r.Replay())
}

// Replay is the command that runs this seed again.
func (r Result) Replay() string {
	audit := ""
	if p := r.Config.AuditPeriod; p != 0 && p != DefaultAuditPeriod {
		audit = fmt.Sprintf(" -audit %v", p)
	}
	return fmt.Sprintf("go test ./integration/reliability -run 'TestReliability/%s$' -seed %d -ops %d -faults %d%s -v",
		r.Adapter, r.Seed, r.Config.Ops, r.Config.FaultsPerKind, audit)
}

// scope is the testing.TB a harness gets: its cleanups run when the run
// ends (before the goroutine check), not when the test does.
type scope struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (s *scope) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *scope) close() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
}

// divergences collects what the checks find; it is the informertest.TB of
// the run's Recorders, so that what they report becomes a divergence of
// the run instead of failing the test.
type divergences struct {
	*scope
	mu   sync.Mutex
	list []string
}

func (d *divergences) Helper() {}

func (d *divergences) Errorf(format string, args ...any) { d.add(fmt.Sprintf(format, args...)) }

func (d *divergences) add(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.list = append(d.list, s)
}

func (d *divergences) all() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.list)
}
