package etcdinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
)

// DefaultPageSize is the number of keys one List page reads when
// Options.PageSize is zero.
const DefaultPageSize = 500

// Options configures a Prefix. The zero value of every field means its
// default.
type Options[T any] struct {
	// LiteralPrefix uses the prefix byte for byte: "user-" covers "user-1"
	// and "user-10", and "/a" covers "/ab". Without it the prefix names a
	// directory (see NewPrefix).
	LiteralPrefix bool
	// Codec decodes values. Nil means codec.JSON[T]; use codec.Raw for a
	// Prefix[[]byte].
	Codec codec.Codec[T]
	// PageSize is the number of keys one List request reads. Zero means
	// DefaultPageSize.
	PageSize int64
	// Logger receives debug messages. Nil means no logging.
	Logger *slog.Logger
	// Where, when set, makes the Prefix a partial sync: conditions on
	// filter.Key narrow the key range etcd reads and watches, the rest is
	// evaluated on each decoded value (see filter.go). Handlers see an
	// object that starts matching as an add and one that stops as a
	// delete carrying its last matching state.
	Where *filter.Filter[T]
	// ProgressInterval is how often an open watch is expected to show a
	// sign of life (driver.ProgressIntervaler): after one interval without
	// events the informer asks for a progress notification, and a watch
	// that answers none for driver.StuckIntervals intervals is reopened
	// (a frozen member, a half-open connection). Zero means
	// DefaultProgressInterval; negative turns stuck-watch detection off.
	ProgressInterval time.Duration
}

// DefaultProgressInterval is Options.ProgressInterval when zero: an idle
// watch is asked for a progress notification (one small request on its
// gRPC stream) after each second without events.
const DefaultProgressInterval = time.Second

// Prefix lists and watches the keys under one etcd prefix: it is a
// driver.ListerWatcher[T] whose resource version is the etcd revision, and it
// implements driver.ProgressReporter, driver.ProgressIntervaler, driver.HealWaiter
// and driver.HeadReader. It is safe for concurrent use; several informers may
// share one.
type Prefix[T any] struct {
	client   *clientv3.Client
	prefix   string // as completed, used to cut keys
	start    string // range start
	end      string // range end
	source   string // for errors: `etcd prefix "/app/"`
	codec    codec.Codec[T]
	pageSize int64
	log      *slog.Logger
	residue  *filter.Filter[T] // nil: unfiltered
	progress time.Duration     // ProgressInterval; 0: off
	answered atomic.Int64      // UnixNano of a watch's probe that the cluster answered
	frozen   atomic.Uint64     // member ID of the last member found frozen (noteFrozen)
	frozenAt atomic.Int64      // UnixNano of when it was
	down     atomic.Int64      // UnixNano of the last failure that looked like an outage (noteFailure)
}

var (
	_ driver.ListerWatcher[struct{}] = (*Prefix[struct{}])(nil)
	_ driver.HeadReader              = (*Prefix[struct{}])(nil)
	_ driver.ProgressReporter        = (*Prefix[struct{}])(nil)
	_ driver.ProgressIntervaler      = (*Prefix[struct{}])(nil)
	_ driver.HealWaiter              = (*Prefix[struct{}])(nil)
)

// NewPrefix returns a Prefix that reads the keys under prefix with client.
//
// The prefix names a directory unless opts.LiteralPrefix is set: a "/" is
// appended when it does not end in one, so that "/a" covers "/a/x" but
// never "/ab/x". The empty prefix covers every key in etcd. An object's key
// is the etcd key with the (completed) prefix removed.
//
// The client is the caller's, used as it is (endpoints, TLS, auth,
// keepalives): the Prefix never closes it, and it stops working when the
// caller closes it (a watch or list then fails with an error matching
// driver.ErrPermanent).
//
// NewPrefix does no I/O; ctx is not used. A server that is down at start
// is the informer's to retry, not the constructor's to refuse. It fails
// only on a nil client or a negative PageSize.
func NewPrefix[T any](ctx context.Context, client *clientv3.Client, prefix string, opts Options[T]) (*Prefix[T], error) {
	_ = ctx
	if client == nil {
		return nil, errors.New("etcdinformer: NewPrefix needs a client")
	}
	if opts.PageSize < 0 {
		return nil, fmt.Errorf("etcdinformer: PageSize %d is negative", opts.PageSize)
	}
	p := &Prefix[T]{
		client:   client,
		codec:    opts.Codec,
		pageSize: opts.PageSize,
		log:      opts.Logger,
	}
	if p.codec == nil {
		p.codec = codec.JSON[T]{}
	}
	if p.pageSize == 0 {
		p.pageSize = DefaultPageSize
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case opts.ProgressInterval == 0:
		p.progress = DefaultProgressInterval
	case opts.ProgressInterval > 0:
		p.progress = opts.ProgressInterval
	}
	p.prefix = prefix
	if !opts.LiteralPrefix && p.prefix != "" && !strings.HasSuffix(p.prefix, "/") {
		p.prefix += "/"
	}
	if p.prefix == "" {
		// "\x00" to "\x00" is etcd's "every key".
		p.start, p.end = "\x00", "\x00"
	} else {
		p.start, p.end = p.prefix, clientv3.GetPrefixRangeEnd(p.prefix)
	}
	p.source = fmt.Sprintf("etcd prefix %q", p.prefix)
	if opts.Where != nil {
		if err := p.applyFilter(opts.Where); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Prefix returns the prefix as used: with the "/" that NewPrefix appended.
func (p *Prefix[T]) Prefix() string { return p.prefix }

// ReportsProgress reports true: a watch answers each request on
// WatchOptions.Progress with etcd's RequestProgress.
func (p *Prefix[T]) ReportsProgress() bool { return true }

// ProgressInterval implements driver.ProgressIntervaler with
// Options.ProgressInterval (DefaultProgressInterval when zero, 0 when
// negative): a watch answers each progress request with a Bookmark.
func (p *Prefix[T]) ProgressInterval() time.Duration { return p.progress }

// key returns the object key of an etcd key. Only the part below the
// prefix is copied: the key is held by the cache for the object's life,
// and a substring would keep the prefix's bytes alive with it.
func (p *Prefix[T]) key(k []byte) string {
	if len(k) >= len(p.prefix) && string(k[:len(p.prefix)]) == p.prefix {
		return string(k[len(p.prefix):])
	}
	return string(k)
}

// decodeInto sets *ev to the event of type typ for kv.
func (p *Prefix[T]) decodeInto(ev *driver.Event[T], typ driver.EventType, kv *mvccpb.KeyValue) {
	*ev = driver.Event[T]{Type: typ, Key: p.key(kv.Key), RV: core.ResourceVersion(kv.ModRevision)}
	obj, err := codec.Decode(p.codec, kv.Value)
	if err != nil {
		ev.Err = &driver.DecodeError{Source: p.source, Key: ev.Key, RV: ev.RV, Err: err}
		return
	}
	ev.Object, ev.HasObject = obj, true
}

// expired reports that etcd compacted the revisions an operation needed,
// as driver.ErrExpired, keeping the etcd error for errors.Is.
func (p *Prefix[T]) expired(op string, compacted int64, cause error) error {
	if compacted > 0 {
		return fmt.Errorf("%s: %s: compacted up to revision %d: %w (%w)", p.source, op, compacted, driver.ErrExpired, cause)
	}
	return fmt.Errorf("%s: %s: %w (%w)", p.source, op, driver.ErrExpired, cause)
}

// failed wraps err, an error of an etcd call, as the error of op: a client
// the caller closed is permanent (it will never serve again), anything else
// is retried by the caller.
func (p *Prefix[T]) failed(op string, err error) error {
	if p.client.Ctx().Err() != nil {
		return driver.Permanent(fmt.Errorf("%s: %s: the etcd client was closed: %w", p.source, op, err))
	}
	p.noteFailure(err)
	return fmt.Errorf("%s: %s: %w", p.source, op, err)
}

// List reads the prefix page by page. The first page is read at the
// current revision R; every later page is pinned to R (the header of a
// pinned read carries the current revision, not R), so the pages form one
// snapshot at R, which List returns. Each item's RV is its ModRevision.
func (p *Prefix[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	// RequireLeader: a member cut off from its cluster refuses the read
	// at once (etcdserver: no leader), and the client retries it on
	// another member, instead of waiting out a linearizable read that
	// cannot complete.
	lctx := clientv3.WithRequireLeader(ctx)
	var rev int64
	key := p.start
	for page := 0; ; page++ {
		ops := []clientv3.OpOption{clientv3.WithRange(p.end), clientv3.WithLimit(p.pageSize)}
		if rev != 0 {
			ops = append(ops, clientv3.WithRev(rev))
		}
		resp, err := p.client.Get(lctx, key, ops...)
		if err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				// Compacted past R between two pages.
				return 0, p.expired(fmt.Sprintf("list page %d at revision %d", page+1, rev), 0, err)
			}
			if rev == 0 {
				return 0, p.failed("list", err)
			}
			return 0, p.failed(fmt.Sprintf("list page %d at revision %d", page+1, rev), err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
			if sink.Estimate != nil {
				sink.Estimate(resp.Count)
			}
		}
		for _, kv := range resp.Kvs {
			var ev driver.Event[T]
			p.decodeInto(&ev, driver.Added, kv)
			if !p.residue.Keep(&ev) {
				continue
			}
			if err := sink.Emit(ev); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	p.log.DebugContext(ctx, "etcd list done", "prefix", p.prefix, "revision", rev)
	return core.ResourceVersion(rev), nil
}

// Head returns etcd's current revision, from the header of a linearizable
// count-only read of the prefix's own range, which a user allowed to read
// just that range may make.
func (p *Prefix[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	resp, err := p.client.Get(clientv3.WithRequireLeader(ctx), p.start, clientv3.WithRange(p.end), clientv3.WithCountOnly())
	if err != nil {
		return 0, p.failed("read head revision", err)
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// Watch watches the prefix from revision from+1 and hands the events of
// each etcd watch response to opts.Emit, as one batch or, for a response of
// more than about a thousand events (history being caught up on), as
// several cut at revision boundaries, until ctx is done (driver.Stopped),
// etcd compacted the revisions it needs (driver.ErrExpired), Emit fails (its
// error), or the etcd watch ends otherwise (that error, naming the revision
// to resume after).
//
// The watch asks for the previous value of each deleted key, for progress
// notifications (delivered as Bookmarks), and for a leader
// (RequireLeader), so that a member cut off from its cluster ends the watch
// instead of holding it silently. Each receive on opts.Progress becomes an
// etcd RequestProgress on the watch's own gRPC stream, answered by a
// Bookmark at etcd's revision at that time; the request is repeated every
// 250ms until a progress notification arrives, since etcd drops one that
// reaches it while the watch is still catching up on history.
func (p *Prefix[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	if ctx.Err() != nil {
		return driver.Stopped(ctx)
	}
	for try := 1; ; try++ {
		var avoid uint64
		if try <= reopenTries {
			avoid = p.knownFrozen()
		}
		err := p.watchOnce(ctx, from, opts, avoid)
		if !errors.Is(err, errOnFrozen) {
			return err
		}
		p.log.DebugContext(ctx, "etcd watch reopened: its stream went to a member found frozen", "prefix", p.prefix, "member", fmt.Sprintf("%x", avoid), "try", try)
	}
}

// watchOnce is one Watch on a gRPC stream of its own; avoid, when not
// zero, is a member found frozen, which the watch leaves at once
// (errOnFrozen) if its stream went there.
func (p *Prefix[T]) watchOnce(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T], avoid uint64) error {
	// The metadata WithRequireLeader adds to wctx selects the gRPC stream
	// of the watch; RequestProgress must use a context carrying it.
	wctx, cancel := context.WithCancel(ownStream(clientv3.WithRequireLeader(ctx)))
	w := &watch[T]{p: p, ctx: wctx, from: from, last: from, avoid: avoid}
	defer func() {
		cancel()
		w.probes.Wait()
	}()
	// The client's Watch returns once its stream took the request, which
	// a stream on a member that stopped answering may never do: opened
	// beside the loop, so that the loop can notice the silence.
	opened := make(chan clientv3.WatchChan, 1)
	w.probes.Go(func() {
		opened <- p.client.Watch(wctx, p.start,
			clientv3.WithRange(p.end),
			clientv3.WithRev(int64(from)+1),
			clientv3.WithPrevKV(),
			clientv3.WithProgressNotify(),
			clientv3.WithCreatedNotify(), // its header names the member (avoid)
		)
	})
	p.log.DebugContext(ctx, "etcd watch", "prefix", p.prefix, "from", from)
	err := w.run(opened, opts)
	if ctx.Err() != nil {
		// Whatever the watch was doing when ctx ended (a failed progress
		// request, a channel closed by the cancel, Emit seeing the
		// cancel), the caller asked it to stop.
		return driver.Stopped(ctx)
	}
	p.log.DebugContext(ctx, "etcd watch ended", "prefix", p.prefix, "from", from, "after", w.last, "error", err)
	return err
}
