package natsinformer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/nats-io/nats.go"

	"github.com/dbinformer/dbinformer/core/driver"
)

// While nats.go reconnects, a request is buffered and times out: the
// reason the server cannot be reached (connection refused, an
// authorization violation, a TLS failure) reaches only nats.go's
// callbacks. connState records the latest of those per connection, so
// that a List or watch whose request fails while the connection is down
// returns at once with that reason instead of retrying silently, and the
// informer reports it (error handler, SyncStatus, WaitForCacheSync).
//
// The adapter chains, on first use of a connection, the disconnect,
// reconnect and async error handlers the connection already has (nats.go
// lets them be read and replaced): a handler the caller sets later
// replaces the chain.
// The reconnect error handler, which alone sees a failed dial, cannot be
// read back from a nats.Conn: ReconnectErrors is the option that records
// it.
type connState struct {
	mu         sync.Mutex
	chained    bool
	disconnect timedErr // why the connection dropped
	reconnect  timedErr // the latest failed reconnect attempt
	async      timedErr // the latest async error (authorization violation...)
}

type timedErr struct {
	err error
	at  time.Time
}

var (
	_ driver.HealWaiter = (*KV[int])(nil)
	_ driver.HealWaiter = (*EventStream[int])(nil)
)

var conns sync.Map // weak.Pointer[nats.Conn] -> *connState

// stateOf returns nc's connState, made on first use and dropped when nc
// is garbage collected.
func stateOf(nc *nats.Conn) *connState {
	key := weak.Make(nc)
	if s, ok := conns.Load(key); ok {
		return s.(*connState)
	}
	s, loaded := conns.LoadOrStore(key, &connState{})
	if !loaded {
		runtime.AddCleanup(nc, func(k weak.Pointer[nats.Conn]) { conns.Delete(k) }, key)
	}
	return s.(*connState)
}

func (s *connState) record(which *timedErr, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	*which = timedErr{err: err, at: time.Now()}
	s.mu.Unlock()
}

// chain installs, once per connection, the adapter's disconnect, reconnect
// and async error handlers in front of those nc has. A reconnect clears
// what the outage recorded.
func (s *connState) chain(nc *nats.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chained {
		return
	}
	s.chained = true
	prevDisc := nc.DisconnectErrHandler()
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		s.record(&s.disconnect, err)
		if prevDisc != nil {
			prevDisc(c, err)
		}
	})
	prevRecon := nc.ReconnectHandler()
	nc.SetReconnectHandler(func(c *nats.Conn) {
		// Back: the reasons of this outage are no reason for the next.
		s.mu.Lock()
		s.disconnect, s.reconnect, s.async = timedErr{}, timedErr{}, timedErr{}
		s.mu.Unlock()
		if prevRecon != nil {
			prevRecon(c)
		}
	})
	prevAsync := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if sub == nil { // a connection-level error, not one subscription's
			s.record(&s.async, err)
		}
		if prevAsync != nil {
			prevAsync(c, sub, err)
		}
	})
}

// ReconnectErrors returns a nats.Option that lets the informers on the
// connection name why it cannot reconnect: nats.go reports a failed
// reconnect attempt (connection refused, a TLS handshake that fails, a
// timeout) only to the connection's reconnect error handler, which cannot
// be read back from a nats.Conn. Pass it to nats.Connect after any
// nats.ReconnectErrHandler of your own, which it calls after recording:
//
//	nc, err := nats.Connect(url, nats.MaxReconnects(-1), natsinformer.ReconnectErrors())
//
// Without it, a List or watch waiting on a reconnect still says that the
// connection is reconnecting, why it dropped and the latest authorization
// error, but not why a dial fails.
func ReconnectErrors() nats.Option {
	return func(o *nats.Options) error {
		prev := o.ReconnectErrCB
		o.ReconnectErrCB = func(nc *nats.Conn, err error) {
			s := stateOf(nc)
			s.record(&s.reconnect, err)
			if prev != nil {
				prev(nc, err)
			}
		}
		return nil
	}
}

// connDownError reports a request that failed while the NATS connection
// was down (or closed): it says how the connection stands and the latest
// reasons nats.go gave, and matches (errors.Is, errors.As) both the
// request's own error and those reasons (nats.ErrAuthorization, a
// *net.OpError...). Credentials are never part of it: nats.go's errors
// name the server's host and port only.
type connDownError struct {
	err    error   // the request's error
	causes []error // the connection's latest errors, newest reason first
	msg    string
}

func (e *connDownError) Error() string   { return e.msg }
func (e *connDownError) Unwrap() []error { return append([]error{e.err}, e.causes...) }

// connError wraps err, a request that failed, with the state of nc. It
// returns nil when nc is connected: then err is the server's (or the
// path's) and not the connection's.
func connError(nc *nats.Conn, err error) error {
	if nc == nil || err == nil {
		return nil
	}
	status := nc.Status()
	switch status {
	case nats.RECONNECTING, nats.DISCONNECTED, nats.CONNECTING, nats.CLOSED:
	default:
		return nil
	}
	last := nc.LastError()
	s := stateOf(nc)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var causes []error
	var why string
	add := func(what string, t timedErr) {
		if t.err == nil {
			return
		}
		for _, c := range causes {
			if errors.Is(c, t.err) || strings.EqualFold(c.Error(), t.err.Error()) {
				return
			}
		}
		causes = append(causes, t.err)
		if t.at.IsZero() {
			why += fmt.Sprintf("; %s: %v", what, t.err)
		} else {
			why += fmt.Sprintf("; %s %v ago: %v", what, roundAgo(now.Sub(t.at)), t.err)
		}
	}
	// Newest first: what a reconnect attempt met, then the server's
	// refusal, then why the connection dropped.
	add("the latest reconnect attempt failed", s.reconnect)
	add("the server refused it", s.async)
	if last != nil {
		add("its last error", timedErr{err: last})
	}
	add("it dropped", s.disconnect)
	if why == "" {
		why = "; no reason reported yet (pass natsinformer.ReconnectErrors() to nats.Connect to see why a reconnect fails)"
	}
	msg := fmt.Sprintf("the NATS connection is %s%s (request: %v)", statusText(status), why, err)
	return &connDownError{err: err, causes: causes, msg: msg}
}

// refusedSince returns the latest permissions violation the server sent
// on nc at or after t (nil if none): a request whose publish the server
// refuses gets no answer, only this asynchronous error, and times out.
func refusedSince(nc *nats.Conn, t time.Time) error {
	if nc == nil {
		return nil
	}
	s := stateOf(nc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.async.err == nil || s.async.at.Before(t) || !errors.Is(s.async.err, nats.ErrPermissionViolation) {
		return nil
	}
	return s.async.err
}

func statusText(s nats.Status) string {
	switch s {
	case nats.RECONNECTING:
		return "reconnecting"
	case nats.DISCONNECTED:
		return "disconnected"
	case nats.CONNECTING:
		return "connecting"
	case nats.CLOSED:
		return "closed"
	}
	return s.String()
}

func roundAgo(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// errNotDown is what WaitHealed returns when the connection is up: the
// failure being waited out was not a lost connection.
var errNotDown = errors.New("natsinformer: the NATS connection is up: no outage to wait out")

// WaitHealed implements driver.HealWaiter: while the informer backs off
// after a List or watch that failed because the connection was down, it
// returns nil as soon as nats.go has reconnected, so that the informer
// retries at once. It returns an error when the connection is up (the
// failure was not a lost connection, and the backoff stands), an error
// matching driver.ErrPermanent when the connection is closed, and
// driver.Stopped(ctx) when ctx ends first.
func (r *streamReader) WaitHealed(ctx context.Context) error {
	if r.nc == nil {
		return errNotDown
	}
	ch := r.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer r.nc.RemoveStatusListener(ch)
	switch r.nc.Status() {
	case nats.CONNECTED:
		return errNotDown
	case nats.CLOSED:
		return r.fatal(nats.ErrConnectionClosed)
	}
	select {
	case st := <-ch:
		if st == nats.CLOSED {
			return r.fatal(nats.ErrConnectionClosed)
		}
		return nil
	case <-ctx.Done():
		return driver.Stopped(ctx)
	}
}
