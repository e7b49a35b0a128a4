package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
)

// DefaultPageSize is the number of keys one List page reads when
// Config.PageSize is zero.
const DefaultPageSize = 500

// Config configures a ListerWatcher. The zero value of every field but one
// of Client and ClientConfig means the default.
type Config[T any] struct {
	// Client is used as it is: its TLS, auth and dial settings are the
	// caller's, and the ListerWatcher never closes it. Set this or
	// ClientConfig.
	Client *clientv3.Client
	// ClientConfig, when Client is nil, is passed unchanged to clientv3.New;
	// the ListerWatcher owns that client and Close closes it.
	ClientConfig *clientv3.Config

	// Prefix selects the keys to watch. Unless LiteralPrefix is set it
	// names a directory: a "/" is appended when it does not end in one, so
	// that Prefix "/a" covers "/a/x" but never "/ab/x". The empty Prefix
	// covers every key in etcd. An object's key is the etcd key with the
	// (completed) prefix removed.
	Prefix string
	// LiteralPrefix uses Prefix byte for byte: "user-" covers "user-1" and
	// "user-10", and "/a" covers "/ab".
	LiteralPrefix bool

	// Codec decodes values. Nil means JSON[T]. Use Raw for []byte.
	Codec Codec[T]
	// PageSize is the number of keys one List request reads. Zero means
	// DefaultPageSize.
	PageSize int64
	// Logger receives debug messages. Nil means no logging.
	Logger *slog.Logger
}

// ListerWatcher lists and watches the keys under one etcd prefix. Its
// resource version is the etcd revision.
type ListerWatcher[T any] struct {
	client   *clientv3.Client
	owned    bool
	prefix   string // as completed, used to cut keys
	start    string // range start
	end      string // range end
	source   string // for errors: `etcd prefix "/app/"`
	codec    Codec[T]
	pageSize int64
	log      *slog.Logger
}

var (
	_ core.ListerWatcher[struct{}] = (*ListerWatcher[struct{}])(nil)
	_ core.HeadReader              = (*ListerWatcher[struct{}])(nil)
	_ core.Watcher[struct{}]       = (*Watcher[struct{}])(nil)
	_ core.ProgressRequester       = (*Watcher[struct{}])(nil)
)

// New returns a ListerWatcher for cfg. With a ClientConfig it creates the
// client (which does not wait for the server to be reachable).
func New[T any](cfg Config[T]) (*ListerWatcher[T], error) {
	lw := &ListerWatcher[T]{
		client:   cfg.Client,
		codec:    cfg.Codec,
		pageSize: cfg.PageSize,
		log:      cfg.Logger,
	}
	if lw.codec == nil {
		lw.codec = JSON[T]{}
	}
	if lw.pageSize < 0 {
		return nil, fmt.Errorf("etcd: PageSize %d is negative", cfg.PageSize)
	}
	if lw.pageSize == 0 {
		lw.pageSize = DefaultPageSize
	}
	if lw.log == nil {
		lw.log = slog.New(slog.DiscardHandler)
	}

	lw.prefix = cfg.Prefix
	if !cfg.LiteralPrefix && lw.prefix != "" && !strings.HasSuffix(lw.prefix, "/") {
		lw.prefix += "/"
	}
	if lw.prefix == "" {
		// "\x00" to "\x00" is etcd's "every key".
		lw.start, lw.end = "\x00", "\x00"
	} else {
		lw.start, lw.end = lw.prefix, clientv3.GetPrefixRangeEnd(lw.prefix)
	}
	lw.source = fmt.Sprintf("etcd prefix %q", lw.prefix)

	if lw.client == nil {
		if cfg.ClientConfig == nil {
			return nil, errors.New("etcd: Config needs a Client or a ClientConfig")
		}
		c, err := clientv3.New(*cfg.ClientConfig)
		if err != nil {
			// The error of clientv3.New names endpoints at most, never
			// the credentials of the config.
			return nil, fmt.Errorf("etcd: create client: %w", err)
		}
		lw.client, lw.owned = c, true
	}
	return lw, nil
}

// Prefix returns the prefix as used: with the "/" that New appended.
func (lw *ListerWatcher[T]) Prefix() string { return lw.prefix }

// Close closes the client if New created it from a ClientConfig; a Client
// passed in is left open.
func (lw *ListerWatcher[T]) Close() error {
	if lw.owned {
		return lw.client.Close()
	}
	return nil
}

// key returns the object key of an etcd key.
func (lw *ListerWatcher[T]) key(k []byte) string {
	return strings.TrimPrefix(string(k), lw.prefix)
}

// decode turns a key-value into an event of type typ.
func (lw *ListerWatcher[T]) decode(typ core.EventType, kv *mvccpb.KeyValue) core.Event[T] {
	ev := core.Event[T]{Type: typ, Key: lw.key(kv.Key), RV: core.ResourceVersion(kv.ModRevision)}
	obj, err := lw.codec.Decode(kv.Value)
	if err != nil {
		ev.Err = &core.DecodeError{Source: lw.source, Key: ev.Key, RV: ev.RV, Err: err}
		return ev
	}
	ev.Object, ev.HasObject = obj, true
	return ev
}

// expired reports that etcd compacted the revisions an operation needed,
// as core.ErrExpired, keeping the etcd error for errors.Is.
func (lw *ListerWatcher[T]) expired(op string, compacted int64, cause error) error {
	if compacted > 0 {
		return fmt.Errorf("%s: %s: compacted up to revision %d: %w (%w)", lw.source, op, compacted, core.ErrExpired, cause)
	}
	return fmt.Errorf("%s: %s: %w (%w)", lw.source, op, core.ErrExpired, cause)
}

// List reads the prefix page by page. The first page is read at the
// current revision R; every later page is pinned to R (the header of a
// pinned read carries the current revision, not R), so the pages form one
// snapshot at R, which List returns. Each item's RV is its ModRevision.
func (lw *ListerWatcher[T]) List(ctx context.Context, opts core.ListOptions[T]) (core.ResourceVersion, error) {
	var rev int64
	key := lw.start
	for page := 0; ; page++ {
		ops := []clientv3.OpOption{clientv3.WithRange(lw.end), clientv3.WithLimit(lw.pageSize)}
		if rev != 0 {
			ops = append(ops, clientv3.WithRev(rev))
		}
		resp, err := lw.client.Get(ctx, key, ops...)
		if err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				// Compacted past R between two pages.
				return 0, lw.expired(fmt.Sprintf("list page %d at revision %d", page+1, rev), 0, err)
			}
			if rev == 0 {
				return 0, fmt.Errorf("%s: list: %w", lw.source, err)
			}
			return 0, fmt.Errorf("%s: list page %d at revision %d: %w", lw.source, page+1, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
			if opts.Estimate != nil {
				opts.Estimate(resp.Count)
			}
		}
		for _, kv := range resp.Kvs {
			if err := opts.Emit(lw.decode(core.Added, kv)); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	lw.log.DebugContext(ctx, "etcd list done", "prefix", lw.prefix, "revision", rev)
	return core.ResourceVersion(rev), nil
}

// Head returns etcd's current revision, from the header of a linearizable
// count-only read of the prefix's own range, which a user allowed to read
// just that range may make.
func (lw *ListerWatcher[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	resp, err := lw.client.Get(ctx, lw.start, clientv3.WithRange(lw.end), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("%s: read head revision: %w", lw.source, err)
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// Watch watches the prefix from revision from+1, with the previous value
// of each deleted key, progress notifications as Bookmarks, and
// RequireLeader so that a member cut off from its cluster ends the watch
// instead of holding it silently.
func (lw *ListerWatcher[T]) Watch(ctx context.Context, from core.ResourceVersion) (core.Watcher[T], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The metadata WithRequireLeader adds to wctx selects the gRPC stream
	// of the watch; RequestProgress must use a context carrying it.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &Watcher[T]{
		lw:     lw,
		ctx:    wctx,
		cancel: cancel,
		from:   from,
	}
	w.ch = lw.client.Watch(wctx, lw.start,
		clientv3.WithRange(lw.end),
		clientv3.WithRev(int64(from)+1),
		clientv3.WithPrevKV(),
		clientv3.WithProgressNotify(),
	)
	return w, nil
}

// Watcher is one open watch on a prefix.
type Watcher[T any] struct {
	lw     *ListerWatcher[T]
	ctx    context.Context
	cancel context.CancelFunc
	ch     clientv3.WatchChan
	from   core.ResourceVersion

	mu   sync.Mutex
	last core.ResourceVersion // newest revision delivered, for errors
}

// Stop ends the watch.
func (w *Watcher[T]) Stop() { w.cancel() }

// RequestProgress asks etcd for a progress notification on this watch,
// which Next delivers as a Bookmark at etcd's revision at that time.
func (w *Watcher[T]) RequestProgress(ctx context.Context) error {
	// Derived from the watch's context so that the request goes to the
	// watch's own stream; cancelled when ctx is done so that the call
	// does not outlive its caller while the client reconnects.
	rctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if err := w.lw.client.RequestProgress(rctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: request progress: %w", w.lw.source, err)
	}
	return nil
}

// Next returns the events of the next watch response, or a Bookmark for a
// progress notification.
func (w *Watcher[T]) Next(ctx context.Context) ([]core.Event[T], error) {
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.ctx.Done():
			return nil, w.ctx.Err()
		case resp, ok = <-w.ch:
		}
		if !ok {
			if err := w.ctx.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%s: watch from revision %d: channel closed", w.lw.source, w.after())
		}
		if resp.CompactRevision != 0 {
			return nil, w.lw.expired(fmt.Sprintf("watch from revision %d", w.after()+1), resp.CompactRevision, rpctypes.ErrCompacted)
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return nil, w.lw.expired(fmt.Sprintf("watch from revision %d", w.after()+1), 0, err)
			}
			if cerr := w.ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, fmt.Errorf("%s: watch from revision %d: %w", w.lw.source, w.after()+1, err)
		}
		if resp.IsProgressNotify() {
			rv := core.ResourceVersion(resp.Header.Revision)
			if rv < w.after() {
				// A bookmark below what was already delivered says
				// nothing new and would break the order the core
				// checks. etcd 3.6 orders progress notifications with
				// the events (etcd issue #15220); this guards against
				// older servers.
				continue
			}
			w.advance(rv)
			return []core.Event[T]{{Type: core.Bookmark, RV: rv}}, nil
		}
		if len(resp.Events) == 0 {
			continue // the Created response
		}
		batch := make([]core.Event[T], 0, len(resp.Events))
		for _, e := range resp.Events {
			batch = append(batch, w.event(e))
		}
		w.advance(batch[len(batch)-1].RV)
		return batch, nil
	}
}

func (w *Watcher[T]) event(e *clientv3.Event) core.Event[T] {
	lw := w.lw
	switch e.Type {
	case clientv3.EventTypePut:
		typ := core.Modified
		if e.IsCreate() {
			typ = core.Added
		}
		return lw.decode(typ, e.Kv)
	default: // clientv3.EventTypeDelete
		ev := core.Event[T]{Type: core.Deleted, Key: lw.key(e.Kv.Key), RV: core.ResourceVersion(e.Kv.ModRevision)}
		if e.PrevKv == nil {
			// Compacted away, or the watch was resumed on a member
			// without it: the informer fills in its cached object.
			return ev
		}
		obj, err := lw.codec.Decode(e.PrevKv.Value)
		if err != nil {
			// The delete itself is certain; only the last value was
			// unreadable (and was reported when it was written).
			lw.log.Debug("etcd: previous value of deleted key does not decode", "prefix", lw.prefix, "key", ev.Key, "revision", ev.RV, "error", err)
			return ev
		}
		ev.Object, ev.HasObject = obj, true
		return ev
	}
}

func (w *Watcher[T]) advance(rv core.ResourceVersion) {
	w.mu.Lock()
	if rv > w.last {
		w.last = rv
	}
	w.mu.Unlock()
}

// after is the revision the watch has delivered everything up to.
func (w *Watcher[T]) after() core.ResourceVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last > w.from {
		return w.last
	}
	return w.from
}
