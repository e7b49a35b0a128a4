package shard

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// NATS is a Backend over a JetStream key-value bucket whose keys carry a
// per-message TTL (nats-server 2.11 or later). A member is the key
// members.<id>, written with the lease as its TTL; a renewal rewrites it,
// with a new TTL, only if nobody else wrote it since (the key's last
// revision), so that a member the server expired stays gone. Each session
// writes a random nonce into its member key. The owner of shard n is the
// key shards.<n>, holding the owner's ID and nonce; its revision is the
// term. A shard is free when its key is absent or its owner's member key
// no longer holds that nonce (expired, or a later session of the ID); a
// take is a write conditioned on the revision it read, so that of two
// replicas taking a shard at once one fails.
//
// Ownership ends when the owner's member key expires, not the shard key:
// the server keeps one TTL per member, renewed with one write, whatever the
// number of shards.
type NATS struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream // the bucket's: reads a deleted key's revision
	bucket string
}

var natsIDRE = regexp.MustCompile(`^[-_=a-zA-Z0-9]+$`)

// natsMarkerTTL is how long the bucket keeps the marker of a member key
// the server expired: watchers (Changed) see the expiry.
const natsMarkerTTL = time.Minute

// NewNATS returns the NATS backend of the replicas that share js's
// account and the key-value bucket named bucket, creating the bucket
// (history 1, per-key TTLs, file storage, the server's replicas default)
// if needed. A bucket created without per-key TTLs is refused with the fix.
// js is the caller's.
func NewNATS(ctx context.Context, js jetstream.JetStream, bucket string) (*NATS, error) {
	if js == nil {
		return nil, errors.New("shard: NewNATS needs a JetStream context")
	}
	if !natsIDRE.MatchString(bucket) {
		return nil, fmt.Errorf("shard: NewNATS: bucket %q must be a key-value bucket name (letters, digits, - _ =)", bucket)
	}
	n := &NATS{js: js, bucket: bucket}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, LimitMarkerTTL: natsMarkerTTL,
			Description: "dbinformer shard membership and ownership"})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, bucket) // another replica made it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("shard: %s: open the bucket: %w", n, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("shard: %s: read the bucket's configuration: %w", n, err)
	}
	if st.LimitMarkerTTL() <= 0 {
		return nil, fmt.Errorf("shard: %s: the bucket does not allow per-key TTLs, which membership leases need; delete it (nats kv del %s) so that NewNATS creates it, or create it with a limit marker TTL (--marker-ttl)", n, bucket)
	}
	if n.stream, err = js.Stream(ctx, "KV_"+bucket); err != nil {
		return nil, fmt.Errorf("shard: %s: open the bucket's stream: %w", n, err)
	}
	n.kv = kv
	return n, nil
}

func (n *NATS) String() string { return fmt.Sprintf("NATS key-value bucket %q", n.bucket) }

func (n *NATS) subject(key string) string { return "$KV." + n.bucket + "." + key }

func memberKey(id string) string { return "members." + id }

// ShardKey is the key of the bucket that records shard's owner; its
// revision is the term.
func (n *NATS) ShardKey(shard int) string { return "shards." + strconv.Itoa(shard) }

// Fence is the option to give a JetStream publish into this bucket (a
// key's subject, $KV.<bucket>.<key>) on behalf of shard's owner under
// term: the server refuses the message (a wrong last sequence error) once
// the shard was taken over or released, whatever a deposed owner still
// believes. Only messages of the bucket's own stream can be fenced so.
func (n *NATS) Fence(shard int, term uint64) jetstream.PublishOpt {
	return jetstream.WithExpectLastSequenceForSubject(term, n.subject(n.ShardKey(shard)))
}

type natsMember struct {
	Weight float64 `json:"weight,omitempty"`
	Nonce  uint64  `json:"nonce"`
}

type natsOwner struct {
	ID    string `json:"id"`
	Nonce uint64 `json:"nonce"`
}

// ttlOf rounds ttl up to whole seconds, the unit of a message TTL.
func ttlOf(ttl time.Duration) time.Duration {
	return max(time.Second, (ttl+time.Second-1)/time.Second*time.Second)
}

// Join creates self's member key with the lease as its TTL; a live key of
// the same ID is refused.
func (n *NATS) Join(ctx context.Context, self Member, ttl time.Duration) (Session, error) {
	if !natsIDRE.MatchString(self.ID) {
		return nil, fmt.Errorf("shard: %s: member ID %q must be non-empty and hold only letters, digits, - _ = (it is part of a key)", n, self.ID)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	val, _ := json.Marshal(natsMember{Weight: self.Weight, Nonce: binary.LittleEndian.Uint64(b[:])})
	rev, err := n.kv.Create(ctx, memberKey(self.ID), val, jetstream.KeyTTL(ttlOf(ttl)))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("shard: %s: join: member %q is held by a live session (another replica with this ID, or this one's last run, whose lease expires within %v)", n, self.ID, ttl)
	}
	if err != nil {
		return nil, fmt.Errorf("shard: %s: join as %q: %w", n, self.ID, err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &natsSession{n: n, self: self, nonce: binary.LittleEndian.Uint64(b[:]), val: val, ttl: ttlOf(ttl), rev: rev, changed: make(chan struct{}, 1), cancel: cancel}
	s.wg.Go(func() { s.watch(wctx) })
	return s, nil
}

type natsSession struct {
	n       *NATS
	self    Member
	nonce   uint64
	val     []byte
	ttl     time.Duration
	changed chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu  sync.Mutex
	rev uint64 // the member key's revision this session last wrote
}

// watch turns every change of the bucket, a member's expiry included, into
// a signal on changed.
func (s *natsSession) watch(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := s.n.kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err == nil {
			for range w.Updates() {
				select {
				case s.changed <- struct{}{}:
				default:
				}
			}
			_ = w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // the watch failed: the periodic look goes on meanwhile
		}
	}
}

func (s *natsSession) Changed() <-chan struct{} { return s.changed }

// Renew rewrites the member key with a fresh TTL if this session wrote it
// last: once the server expired it (or anyone else wrote it) the session
// is lost.
func (s *natsSession) Renew(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ack, err := s.n.js.Publish(ctx, s.n.subject(memberKey(s.self.ID)), s.val,
		jetstream.WithExpectLastSequencePerSubject(s.rev), jetstream.WithMsgTTL(s.ttl))
	if isWrongLastSeq(err) {
		return fmt.Errorf("shard: %s: member %q: %w (its key expired or was taken over)", s.n, s.self.ID, ErrSessionLost)
	}
	if err != nil {
		return fmt.Errorf("shard: %s: member %q: renew: %w", s.n, s.self.ID, err)
	}
	s.rev = ack.Sequence
	return nil
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Members reads the live member keys (the server removed expired ones).
func (s *natsSession) Members(ctx context.Context) ([]Member, error) {
	w, err := s.n.kv.Watch(ctx, "members.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("shard: %s: read members: %w", s.n, err)
	}
	defer func() { _ = w.Stop() }()
	var out []Member
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("shard: %s: read members: the watch ended early", s.n)
			}
			if e == nil { // every current value seen
				return out, nil
			}
			var v natsMember
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				return nil, fmt.Errorf("shard: %s: member key %q holds %d bytes that are not a member's JSON: %w", s.n, e.Key(), len(e.Value()), err)
			}
			out = append(out, Member{ID: e.Key()[len("members."):], Weight: v.Weight})
		case <-ctx.Done():
			return nil, fmt.Errorf("shard: %s: read members: %w", s.n, ctx.Err())
		}
	}
}

// Acquire takes shard if its key is absent, or its owner's member key no
// longer holds the owner's nonce, by a write conditioned on the revision
// read.
func (s *natsSession) Acquire(ctx context.Context, shard int) (uint64, bool, error) {
	key := s.n.ShardKey(shard)
	fail := func(err error) (uint64, bool, error) {
		return 0, false, fmt.Errorf("shard: %s: member %q: acquire shard %d: %w", s.n, s.self.ID, shard, err)
	}
	mine, _ := json.Marshal(natsOwner{ID: s.self.ID, Nonce: s.nonce})
	m, err := s.n.stream.GetLastMsgForSubject(ctx, s.n.subject(key))
	var prev uint64 // the revision the take is conditioned on; 0: no message
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fail(err)
	case m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "":
		prev = m.Sequence // released, or removed
	default:
		var o natsOwner
		if err := json.Unmarshal(m.Data, &o); err != nil {
			return fail(fmt.Errorf("key %q holds %d bytes that are not an owner's JSON: %w", key, len(m.Data), err))
		}
		if o == (natsOwner{ID: s.self.ID, Nonce: s.nonce}) {
			// Taken by this very session when an earlier attempt
			// committed but its answer was lost.
			return m.Sequence, true, nil
		}
		live, err := s.n.holds(ctx, o)
		if err != nil {
			return fail(err)
		}
		if live {
			return 0, false, nil
		}
		prev = m.Sequence
	}
	ack, err := s.n.js.Publish(ctx, s.n.subject(key), mine, jetstream.WithExpectLastSequencePerSubject(prev))
	if isWrongLastSeq(err) {
		return 0, false, nil // another replica took it first
	}
	if err != nil {
		return fail(err)
	}
	return ack.Sequence, true, nil
}

// holds reports whether o's session is live: its member key holds its
// nonce.
func (n *NATS) holds(ctx context.Context, o natsOwner) (bool, error) {
	e, err := n.kv.Get(ctx, memberKey(o.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read member %q: %w", o.ID, err)
	}
	var v natsMember
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return false, fmt.Errorf("member key of %q holds %d bytes that are not a member's JSON: %w", o.ID, len(e.Value()), err)
	}
	return v.Nonce == o.Nonce, nil
}

// Release deletes the shard's key if it is still at term.
func (s *natsSession) Release(ctx context.Context, shard int, term uint64) error {
	err := s.n.kv.Delete(ctx, s.n.ShardKey(shard), jetstream.LastRevision(term))
	if err != nil && !isWrongLastSeq(err) {
		return fmt.Errorf("shard: %s: member %q: release shard %d (term %d): %w", s.n, s.self.ID, shard, term, err)
	}
	return nil
}

// Close deletes the member key if this session wrote it last: every shard
// it owned is free at once.
func (s *natsSession) Close(ctx context.Context) error {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.n.kv.Delete(ctx, memberKey(s.self.ID), jetstream.LastRevision(s.rev))
	if err != nil && !isWrongLastSeq(err) {
		return fmt.Errorf("shard: %s: member %q: delete the member key (it expires on its own): %w", s.n, s.self.ID, err)
	}
	return nil
}
