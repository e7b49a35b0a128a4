package etcdinformer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dbinformer/dbinformer/internal/heal"
)

const (
	// probeAfter is how long a watch with an unanswered progress request
	// may stay silent (nothing at all from etcd) before it reads the head
	// revision to find out why: a member that answers nothing while the
	// cluster answers reads is frozen or behind a half-open connection
	// (gRPC keepalives notice that only after 10s or more), and a read
	// that fails says what the client's own retries are running into.
	probeAfter = time.Second
	// probeTimeout bounds that read (and each of WaitHealed's): a read
	// balanced onto the same silent member ends the watch too, and the
	// reopened watch goes to the next member.
	probeTimeout = time.Second
	// healFirstProbe and healMaxProbe pace WaitHealed's reads: often at
	// first, then every second.
	healFirstProbe = 100 * time.Millisecond
	healMaxProbe   = time.Second
)

// streamKey is the gRPC metadata entry that gives each Watch a stream of
// its own.
const streamKey = "dbinformer-watch"

var streamSeq atomic.Uint64

// ownStream marks ctx so that the etcd client opens a gRPC stream for this
// watch alone. The client groups the watches whose contexts carry the same
// metadata on one stream; a watch reopened because its member stopped
// answering would otherwise join the same silent stream (the others on it
// are as stuck), while a new stream is balanced onto another member.
func ownStream(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, streamKey, strconv.FormatUint(streamSeq.Add(1), 10))
}

// probeResult is what a liveness probe found.
type probeResult struct {
	started time.Time
	rev     int64
	err     error
}

// silent reports that the watch has heard nothing from etcd for
// probeAfter and that a progress request has gone unanswered for at least
// progressRetry (long enough for a live member to answer it).
func (w *watch[T]) silent() bool {
	now := time.Now()
	return !w.asked.IsZero() && now.Sub(w.asked) >= progressRetry && now.Sub(w.heard) >= probeAfter
}

// probe reads the head revision beside the watch, with RequireLeader, and
// delivers the outcome on the returned channel.
func (w *watch[T]) probe() <-chan probeResult {
	c := make(chan probeResult, 1)
	started := time.Now()
	w.probes.Go(func() {
		ctx, cancel := context.WithTimeout(w.ctx, probeTimeout)
		defer cancel()
		resp, err := w.p.client.Get(ctx, w.p.start, clientv3.WithRange(w.p.end), clientv3.WithCountOnly())
		res := probeResult{started: started, err: err}
		if err == nil {
			res.rev = resp.Header.Revision
		}
		c <- res
	})
	return c
}

// atHead reports that a probe found the cluster's head revision at or
// below the watch's start (from): nothing was written since, and etcd
// sends no progress notification to a watch whose start revision (from+1)
// is past its own (server/storage/mvcc progressIfSync), however long it
// is asked. That happens to a watch opened at the head of an idle cluster:
// after a List, or from a checkpoint whose warm start asks for a bookmark
// to count as synced. The caller answers the request with a Bookmark at
// from instead of ending the watch as frozen.
func (w *watch[T]) atHead(res probeResult) bool {
	return w.ctx.Err() == nil && !w.asked.IsZero() && res.err == nil && res.rev <= int64(w.from)
}

// probed decides what a probe's outcome means for a watch that was
// silent when it started: nothing if etcd spoke on the watch meanwhile or
// the request was answered; else the watch ends, with the read's error
// (no leader, connection refused: the cause of the silence), or, when the
// cluster answered the read, as stuck on its member, so that the caller
// reopens it (on a stream of its own, which the client balances onto
// another member).
func (w *watch[T]) probed(res probeResult) error {
	if w.ctx.Err() != nil || w.asked.IsZero() || w.heard.After(res.started) {
		return nil
	}
	silent := time.Since(w.heard).Round(time.Millisecond)
	op := fmt.Sprintf("watch from revision %d", w.last+1)
	if res.err != nil {
		return w.p.failed(op, fmt.Errorf("etcd sent nothing for %v after a progress request, and a read of the head revision failed: %w", silent, res.err))
	}
	w.p.answered.Store(time.Now().UnixNano())
	w.p.noteFrozen(w.member)
	w.p.log.WarnContext(w.ctx, "etcd watch silent while the cluster answers: reopening it", "prefix", w.p.prefix, "after", w.last, "silent", silent, "head", res.rev)
	return fmt.Errorf("%s: %s: etcd sent nothing for %v after a progress request while the cluster answers reads (head revision %d): the member serving the watch is frozen or unreachable", w.p.source, op, silent, res.rev)
}

// errNotDown is what WaitHealed returns when etcd answered its first read
// and nothing says it was down: the failure being waited out was not an
// outage.
var errNotDown = heal.ErrNotDown

// downWindow is how recent a failure that looked like an outage must be
// for a first read that succeeds to count as a heal (see WaitHealed).
const downWindow = 30 * time.Second

// noteFailure remembers a failure that looks like etcd, or the path to it,
// being down (unreachable, no leader, a deadline run out on a member that
// does not answer), for WaitHealed.
func (p *Prefix[T]) noteFailure(err error) {
	if outage(err) {
		p.down.Store(time.Now().UnixNano())
	}
}

// outage reports an error that a server being down or unreachable gives:
// a client that cannot connect retries until its deadline, so "context
// deadline exceeded" is what a read of a killed member says, not only
// "connection refused".
func outage(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no leader")
}

// wasDown reports, once, a failure that looked like an outage within
// downWindow: the read that succeeds at once after it is a heal (a
// restarted member, a failure at the very instant the path came back).
// Once only, so that failures that keep coming while etcd answers reads
// climb the backoff after one immediate retry each.
func (p *Prefix[T]) wasDown() bool {
	d := p.down.Swap(0)
	return d != 0 && time.Since(time.Unix(0, d)) < downWindow
}

// WaitHealed implements driver.HealWaiter: an informer backing off after a
// failed List or Watch runs it beside its sleep and retries at once when it
// returns nil, instead of finishing its sleep after etcd is back.
//
// It reads the head revision (as Head does, with RequireLeader, each read
// bounded to 1s) at once, then after 100ms, growing to every second. It
// returns nil when a read succeeds after at least one failed (etcd, the
// path to it or a leader was missing and is back), or when the first read
// succeeds after a failure that looked like an outage however it was
// worded ("context deadline exceeded" from a killed member, "connection
// refused", "no leader": a member restarted, or the failure came at the
// very instant of a heal). It returns an error when the first read
// succeeds otherwise (retrying at once after failures the server answers
// is what a backoff prevents; also, without a read, right after a watch
// found the cluster answering while its own member was silent), an error
// matching driver.ErrPermanent when the client was closed, and
// driver.Stopped(ctx) when ctx ends first.
func (p *Prefix[T]) WaitHealed(ctx context.Context) error {
	if time.Since(time.Unix(0, p.answered.Load())) < probeTimeout && !p.wasDown() {
		// A watch just ended because its member was silent while the
		// cluster answered its probe: no outage. Not read again, so that
		// the reopened watch's stream is not balanced back onto the
		// silent member by a round robin that counts this read.
		return errNotDown
	}
	err := heal.Wait(ctx, func(ctx context.Context) error {
		_, err := p.Head(ctx)
		return err
	}, heal.Options{First: healFirstProbe, Max: healMaxProbe, Timeout: probeTimeout, What: "etcd", Log: p.log, Down: p.wasDown})
	if err == nil {
		p.down.Store(0) // this heal is taken: its failed reads do not count again
	}
	return err
}

const (
	// frozenWindow is how long a member found frozen (its watch silent
	// while the cluster answered) is avoided by reopened watches.
	frozenWindow = 30 * time.Second
	// createdWait is how long a watch opened while a member is known
	// frozen waits for its first response (the created notification, at
	// once from a live member) before taking its stream for one on the
	// frozen member and opening another.
	createdWait = 300 * time.Millisecond
	// reopenTries bounds how many times a Watch reopens for that; after
	// them it stays where its stream went (the silence check still runs).
	reopenTries = 4
)

// errOnFrozen ends a watch whose stream went to a member found frozen:
// Watch opens another stream, which the client balances onto the next
// member, instead of waiting a second or more for the silence to show.
var errOnFrozen = errors.New("etcdinformer: the watch's stream went to a member found frozen")

// noteFrozen remembers member (0: unknown) as frozen.
func (p *Prefix[T]) noteFrozen(member uint64) {
	if member != 0 {
		p.frozen.Store(member)
		p.frozenAt.Store(time.Now().UnixNano())
	}
}

// knownFrozen returns the member found frozen within frozenWindow, or 0.
func (p *Prefix[T]) knownFrozen() uint64 {
	if time.Since(time.Unix(0, p.frozenAt.Load())) < frozenWindow {
		return p.frozen.Load()
	}
	return 0
}

// createdDeadline fires createdWait after the start of a watch that must
// avoid a frozen member; nil otherwise.
func (w *watch[T]) createdDeadline() <-chan time.Time {
	if w.avoid == 0 {
		return nil
	}
	return time.After(createdWait)
}

// heardFrom notes the member that sent a response, and ends a watch whose
// first response came from the member it must avoid.
func (w *watch[T]) heardFrom(member uint64) error {
	if member != 0 {
		w.member = member
	}
	if !w.created {
		w.created = true
		if w.avoid != 0 && member == w.avoid {
			return errOnFrozen
		}
	}
	return nil
}
