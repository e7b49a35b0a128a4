package natsinformer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
)

// KVOptions configures a KV ListerWatcher. The zero value watches every key
// of the bucket and decodes values as JSON.
type KVOptions[T any] struct {
	// Prefix restricts the watch to keys that start with it and removes it
	// from the keys reported, like an etcd prefix. It is literal (no
	// wildcards) and ends with "." because NATS matches keys by
	// dot-separated tokens: "users." watches "users.alice".
	Prefix string
	// Filter is a key pattern below Prefix: "*" matches one token, ">" the
	// rest ("eu.*.config", "eu.>"). Empty means every key below Prefix.
	// Reported keys are the full key below Prefix, not just the wildcard
	// part.
	Filter string
	// Where, when set, makes the watch a partial sync (package filter):
	// one condition on filter.Key becomes the subject filter (see
	// filter.go), the rest is evaluated on each decoded value; handlers see
	// a key that starts matching as an add and one that stops as a delete
	// carrying its last matching value.
	Where *filter.Filter[T]
	// Codec decodes values; nil means codec.JSON[T]. Its Decode is called
	// through codec.Decode (a panic becomes a *driver.DecodeError).
	Codec codec.Codec[T]
	// Logger receives debug lines; nil discards them.
	Logger *slog.Logger
	// BatchSize bounds the messages buffered from the server and the
	// events per batch; zero (or negative) sizes it from the stream's
	// average message: as many as fit 16 MiB, from 64 to 4096 (measured:
	// 256 made the initial sync of 100k small keys ~1.7x the raw KV
	// watcher, 1024 up to 1.34x on a 3-node cluster, 4096 up to 1.12x;
	// see bench/).
	BatchSize int
	// IdleCheck is how long a watch waits without messages before it reads
	// the stream's head to send a Bookmark and to notice values removed
	// without a delete marker (MaxAge, purges); zero means 5s, negative
	// turns idle checks off. A request on WatchOptions.Progress does the
	// same at once. Messages that skip stream sequences, or that follow a
	// reconnect, are checked for such removals before they are applied,
	// whatever IdleCheck says.
	IdleCheck time.Duration
}

// KV lists and watches the keys of one JetStream key-value bucket. The
// resource version is the bucket's stream sequence (the KV revision).
type KV[T any] struct {
	streamReader
	bucket  string
	subject string // "$KV.<bucket>.<Prefix>"
	codec   codec.Codec[T]
	residue *filter.Filter[T] // nil: unfiltered

	mu     sync.Mutex
	parked *kvPark
}

var (
	_ driver.ListerWatcher[int] = (*KV[int])(nil)
	_ driver.HeadReader         = (*KV[int])(nil)
	_ driver.ProgressReporter   = (*KV[int])(nil)
	_ driver.SupersededSkipper  = (*KV[int])(nil)
)

// kvPark is the live key → revision map at rv, left by the last List or
// watch for the watch that resumes from rv.
type kvPark struct {
	rv   uint64
	revs map[string]uint64
}

// NewKV checks the options, reads the bucket's stream (I/O: a KV lookup
// and a stream info request) and returns its ListerWatcher; a bucket that
// does not exist is an error naming it. The connection behind js (TLS,
// credentials, reconnects) is the caller's, and so is closing it.
func NewKV[T any](ctx context.Context, js jetstream.JetStream, bucket string, opts KVOptions[T]) (*KV[T], error) {
	source := fmt.Sprintf("nats kv bucket %q", bucket)
	if err := checkPattern("bucket name", bucket, false); err != nil || strings.Contains(bucket, ".") {
		return nil, fmt.Errorf("%s: invalid bucket name (letters, digits, '-' and '_' only)", source)
	}
	if opts.Prefix != "" {
		if !strings.HasSuffix(opts.Prefix, ".") {
			return nil, fmt.Errorf("%s: KVOptions.Prefix %q must end with \".\" (keys match by dot-separated tokens)", source, opts.Prefix)
		}
		if err := checkPattern("KVOptions.Prefix", strings.TrimSuffix(opts.Prefix, "."), false); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
	}
	if opts.Filter != "" {
		if err := checkPattern("KVOptions.Filter", opts.Filter, true); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
	}
	pattern, residue, err := kvWhere(source, opts.Filter, opts.Where)
	if err != nil {
		return nil, err
	}
	if pattern == "" {
		pattern = ">"
	}
	if _, err := js.KeyValue(ctx, bucket); err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("%s does not exist: create it (jetstream.CreateKeyValue, or `nats kv add %s`) before starting the informer: %w", source, bucket, err)
		}
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("%s: open its stream KV_%s: %w", source, bucket, err)
	}
	cfg := stream.CachedInfo().Config
	subject := "$KV." + bucket + "."
	if cfg.Mirror != nil || !slices.Contains(cfg.Subjects, subject+">") {
		return nil, fmt.Errorf("%s: its stream does not hold the subjects %q (a mirror or a bucket behind an API prefix is not supported)", source, subject+">")
	}
	batch, idle := max(opts.BatchSize, 0), opts.IdleCheck
	if idle == 0 {
		idle = 5 * time.Second
	}
	k := &KV[T]{bucket: bucket, subject: subject + opts.Prefix, codec: opts.Codec, residue: residue}
	k.init(js, stream, source, subject+opts.Prefix+pattern, batch, idle, opts.Logger)
	if k.codec == nil {
		k.codec = codec.JSON[T]{}
	}
	return k, nil
}

// Head returns the bucket's last stream sequence, as its stream leader
// sees it.
func (k *KV[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	info, err := k.info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: read stream state: %w", k.source, err)
	}
	return core.ResourceVersion(info.State.LastSeq), nil
}

// ReportsProgress is true: a watch answers each request on
// WatchOptions.Progress with a Bookmark at the stream's head once nothing
// it watches is pending there.
func (k *KV[T]) ReportsProgress() bool { return true }

// SkipsSuperseded is true for a bucket (driver.SupersededSkipper): it keeps a key's
// last History values, and a watch that reaches a key's message after a
// later one removed it skips it; the later one follows, but until it has
// been delivered no version from the skipped one on counts as applied.
// The informer then takes its applied version from the watch's bookmarks
// (head proofs: nothing the watch matches left after its position), and
// WaitFor asks for one.
func (k *KV[T]) SkipsSuperseded() bool { return k.supersedes }

// maxListAttempts bounds how many times a List starts over when its
// consumer is lost (a node restarted, the consumer moved).
const maxListAttempts = 4

// List reads the last value of every watched key with a consumer that
// delivers the last message per subject, then whatever arrives while it
// reads, until everything up to the stream's head (read from the stream
// leader before the consumer started) has been delivered: the consumer
// has delivered its initial set and the leader holds no watched message
// between the last one delivered and the head. The set folded from those
// messages is the bucket as of the head or the highest sequence delivered,
// whichever is higher, which is the version returned. Values are decoded as
// they arrive and emitted in revision order once the fold is complete.
func (k *KV[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	var (
		rv   uint64
		fold *kvFold[T]
		err  error
	)
	start := time.Now()
	for attempt := 1; ; attempt++ {
		rv, fold, err = k.read(ctx, sink.Estimate)
		if err == nil || !startOver(ctx, start, attempt, err) {
			break
		}
		k.log.Debug("nats kv list starts over", "bucket", k.bucket, "err", err)
	}
	if err != nil {
		return 0, err
	}
	if err := k.emitFold(fold, sink); err != nil {
		return 0, err
	}
	k.park(rv, fold.revs)
	k.log.Debug("nats kv listed", "bucket", k.bucket, "keys", len(fold.revs), "rv", rv)
	return core.ResourceVersion(rv), nil
}

// emitFold hands a complete fold's live keys to sink, in revision order.
func (k *KV[T]) emitFold(fold *kvFold[T], sink driver.ListSink[T]) error {
	for i := range fold.events {
		if fold.events[i].Key == "" {
			continue // superseded or deleted during the list
		}
		if !k.residue.Keep(&fold.events[i]) {
			fold.events[i] = driver.Event[T]{}
			continue
		}
		if err := sink.Emit(fold.events[i]); err != nil {
			return err
		}
		fold.events[i] = driver.Event[T]{} // let the object go
	}
	return nil
}

// kvFold is a list's fold of the bucket: the live keys' latest values,
// decoded as they arrive (the decoding then runs beside the network
// receive instead of in a pass after it; measured on
// bench.BenchmarkNATSKV, that pass and the re-sort behind it were most of
// List's gap to the raw KV watcher, which decodes as it receives). The
// consumer delivers in stream sequence order, so events is in revision
// order already; a value superseded or deleted later in the list is
// blanked (Key "", RV kept), found by binary search on its revision.
type kvFold[T any] struct {
	events []driver.Event[T]
	revs   map[string]uint64 // live keys and the revision of their value
}

func (f *kvFold[T]) drop(key string) {
	rev, ok := f.revs[key]
	if !ok {
		return
	}
	delete(f.revs, key)
	if i, ok := slices.BinarySearchFunc(f.events, rev, func(e driver.Event[T], rev uint64) int {
		return cmp.Compare(uint64(e.RV), rev)
	}); ok {
		// Blanked, keeping its revision: the search needs events sorted.
		f.events[i] = driver.Event[T]{RV: f.events[i].RV}
	}
}

// read folds the bucket's watched keys: see List.
func (k *KV[T]) read(ctx context.Context, estimate func(int64)) (uint64, *kvFold[T], error) {
	info, err := k.info(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: read stream state: %w", k.source, err)
	}
	k.id.reset(info)
	top := info.State.LastSeq
	fold := &kvFold[T]{revs: map[string]uint64{}}
	if top == 0 {
		return 0, fold, nil
	}
	f, err := k.openFeed(ctx, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: create list consumer: %w", k.source, err)
	}
	defer f.close()
	if pending := f.info().NumPending; pending > 0 {
		if estimate != nil {
			estimate(int64(pending))
		}
		// Sized for the initial set; what arrives meanwhile grows them.
		n := int(min(pending, maxPresize))
		fold.events = make([]driver.Event[T], 0, n)
		fold.revs = make(map[string]uint64, n)
	}
	last, err := f.drain(ctx, 0, top, true, false, func(m jetstream.Msg, seq uint64) error {
		return k.foldMsg(fold, m, seq, info.State.FirstSeq)
	})
	if err != nil {
		return 0, nil, fmt.Errorf("list: %w", err)
	}
	return max(top, last), fold, nil
}

// foldMsg folds message m at seq into a List's fold; first is the
// stream's first sequence as its leader reported it before the list.
func (k *KV[T]) foldMsg(fold *kvFold[T], m jetstream.Msg, seq, first uint64) error {
	key, ok := k.key(m.Subject())
	if !ok {
		return fmt.Errorf("%s: list: message %d on unexpected subject %q", k.source, seq, m.Subject())
	}
	if seq < first {
		// The leader had removed it (a purge, an age limit) before
		// the list began: the consumer's node has not applied that
		// yet, and a list from it would hold keys the bucket no
		// longer has, at a version that claims it does not.
		return &feedError{fmt.Errorf("message %d delivered, below the stream's first sequence %d as its leader reported it: the consumer's node lags", seq, first)}
	}
	if n := len(fold.events); n > 0 && uint64(fold.events[n-1].RV) >= seq {
		// The fold relies on delivery in stream order; a consumer
		// that breaks it is not trusted (the list starts over).
		return &feedError{fmt.Errorf("message %d delivered after message %d: out of stream order", seq, fold.events[n-1].RV)}
	}
	fold.drop(key)
	if !isDelete(m) {
		// Decoded in its slot: an event returned by value and then
		// appended was a second copy per key on the reader's path.
		fold.events = append(fold.events, driver.Event[T]{})
		k.fill(&fold.events[len(fold.events)-1], driver.Added, key, seq, m.Data())
		fold.revs[key] = seq
	}
	return nil
}

// Watch delivers every put, delete and purge of a watched key after from,
// through opts.Emit, until ctx ends (driver.Stopped), the stream no longer
// holds what from needs (driver.ErrExpired), the bucket is deleted
// (driver.ErrPermanent) or something else fails; see the package doc.
// A consumer that is lost or unusable (a node restarted, a step-down,
// missed heartbeats) is replaced from the last version emitted, a bounded
// number of times in a row, without ending the watch.
func (k *KV[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	a := &kvApplier[T]{kv: k}
	k.mu.Lock()
	if p := k.parked; p != nil && p.rv == uint64(from) {
		a.revs, a.known = p.revs, true
		k.parked = nil
	}
	k.mu.Unlock()
	if from == 0 {
		a.known = true // nothing came before
	}
	if a.revs == nil {
		a.revs = make(map[string]uint64)
	}
	return watch[T](ctx, &k.streamReader, uint64(from), a, opts)
}

func (k *KV[T]) park(rv uint64, revs map[string]uint64) {
	k.mu.Lock()
	k.parked = &kvPark{rv: rv, revs: revs}
	k.mu.Unlock()
}

func (k *KV[T]) key(subject string) (string, bool) {
	key, ok := strings.CutPrefix(subject, k.subject)
	return key, ok && key != ""
}

// fill decodes data into *ev, a zero event, as an event of typ for key at
// rev.
func (k *KV[T]) fill(ev *driver.Event[T], typ driver.EventType, key string, rev uint64, data []byte) {
	ev.Type, ev.Key, ev.RV = typ, key, core.ResourceVersion(rev)
	obj, err := codec.Decode(k.codec, data)
	if err != nil {
		ev.Err = &driver.DecodeError{Source: k.source, Key: key, RV: ev.RV, Err: err}
		return
	}
	ev.Object, ev.HasObject = obj, true
}

// isDelete: a KV delete or purge marker, or a marker the server leaves when
// it removes a key's value on its own (LimitMarkerTTL: MaxAge, Purge,
// Remove).
func isDelete(m jetstream.Msg) bool {
	h := m.Headers()
	if len(h) == 0 {
		return false
	}
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

type kvApplier[T any] struct {
	kv    *KV[T]
	revs  map[string]uint64 // live keys and the revision of their value
	known bool              // revs holds every live key, not only those seen by this watch
	// newer: keys whose value in revs was found superseded by a message
	// not delivered yet, and that message's sequence. While the stream
	// still holds it, lost need not look the key up again: a History 1
	// bucket rewritten while the watch lags would otherwise cost a lookup
	// per key at every check.
	newer map[string]uint64
}

func (a *kvApplier[T]) apply(m jetstream.Msg, seq uint64, out []driver.Event[T]) []driver.Event[T] {
	key, ok := a.kv.key(m.Subject())
	if !ok {
		return out // the filter makes this impossible
	}
	if n, ok := a.newer[key]; ok && n <= seq {
		delete(a.newer, key)
	}
	if isDelete(m) {
		delete(a.revs, key)
		return append(out, driver.Event[T]{Type: driver.Deleted, Key: key, RV: core.ResourceVersion(seq)})
	}
	// A key already held leaves the map's size as it was: one hash and
	// probe per message instead of a lookup and then an assignment.
	typ, held := driver.Added, len(a.revs)
	a.revs[key] = seq
	if len(a.revs) == held {
		typ = driver.Modified
	}
	out = append(out, driver.Event[T]{})
	a.kv.fill(&out[len(out)-1], typ, key, seq, m.Data())
	return rewriteLast(a.kv.residue, out, len(out)-1)
}

// lost finds a live key whose value is older than the stream's first
// retained sequence: MaxAge or a purge removed it without a delete marker,
// so the cache holds a key the bucket no longer has. A key with a newer
// message that the consumer has not delivered yet was only superseded.
// Keys are checked oldest first (MaxAge removes those first); past
// maxLostLookups the rest is assumed lost, and the relist sorts it out.
func (a *kvApplier[T]) lost(ctx context.Context, first uint64) (string, error) {
	type kr struct {
		key string
		rev uint64
	}
	var old []kr
	for key, rev := range a.revs {
		if rev >= first {
			continue
		}
		if n, ok := a.newer[key]; ok && n > rev && n >= first {
			continue
		}
		old = append(old, kr{key, rev})
	}
	if len(old) == 0 {
		return "", nil
	}
	slices.SortFunc(old, func(x, y kr) int { return cmp.Compare(x.rev, y.rev) })
	for i, o := range old {
		if i == maxLostLookups {
			return fmt.Sprintf("%d keys have values older than the stream's first retained sequence %d, too many to check one by one", len(old), first), nil
		}
		seq, found, err := a.kv.get(ctx, msgGetRequest{LastFor: a.kv.subject + o.key})
		if err != nil {
			return "", fmt.Errorf("read the last message of key %q: %w", o.key, err)
		}
		if found && seq > o.rev {
			if a.newer == nil {
				a.newer = make(map[string]uint64)
			}
			a.newer[o.key] = seq
			continue
		}
		return fmt.Sprintf("the value of key %q at sequence %d is no longer in the stream (first retained sequence %d; MaxAge or a purge removed it without a delete marker)", o.key, o.rev, first), nil
	}
	return "", nil
}

const maxLostLookups = 256

func (a *kvApplier[T]) complete() bool { return a.known }

func (a *kvApplier[T]) skipsSafe() bool { return false }

// expect sizes an empty key map for the keys the consumer will deliver:
// grown from nothing, the map's growth was half of its cost on a watch
// of 100k new keys (bench.BenchmarkNATSKV's changes; see
// BenchmarkFoldWatch).
func (a *kvApplier[T]) expect(keys uint64) {
	if len(a.revs) == 0 && keys > 0 {
		a.revs = make(map[string]uint64, min(keys, maxPresize))
	}
}

// maxPresize bounds the keys a map or slice is sized for ahead of them.
const maxPresize = 1 << 20

func (a *kvApplier[T]) park(rv uint64) {
	if a.known {
		a.kv.park(rv, a.revs)
	}
}
