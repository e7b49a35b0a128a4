package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is a Backend over etcd: each session is a lease; a member is the key
// <prefix>/members/<id> and the owner of shard n the key
// <prefix>/shards/<n>, both attached to the lease, so that a replica that
// stops renewing loses its membership and every shard at once when the
// lease expires. A shard is taken by a transaction that creates its key
// only if absent; the key's create revision is the term.
type Etcd struct {
	client *clientv3.Client
	prefix string
}

// NewEtcd returns the etcd backend of the replicas that share client's
// cluster and prefix (for example "/myapp/shards"). The client is the
// caller's.
func NewEtcd(client *clientv3.Client, prefix string) (*Etcd, error) {
	if client == nil {
		return nil, errors.New("shard: NewEtcd needs an etcd client")
	}
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("shard: NewEtcd: prefix %q must be non-empty and not end in / (for example \"/myapp/shards\")", prefix)
	}
	return &Etcd{client: client, prefix: prefix}, nil
}

func (e *Etcd) String() string { return fmt.Sprintf("etcd prefix %q", e.prefix) }

func (e *Etcd) memberKey(id string) string { return e.prefix + "/members/" + id }

// ShardKey is the key that records shard's owner; its create revision is
// the term.
func (e *Etcd) ShardKey(shard int) string { return e.prefix + "/shards/" + strconv.Itoa(shard) }

// Fence is the comparison to put in the If of a transaction that writes
// on behalf of shard's owner under term: the transaction fails (Succeeded
// false) once the shard was released or its owner's lease expired,
// whatever a deposed owner still believes.
func (e *Etcd) Fence(shard int, term uint64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(e.ShardKey(shard)), "=", int64(term))
}

type memberValue struct {
	Weight float64 `json:"weight,omitempty"`
}

// Join grants a lease of ttl (rounded up to whole seconds, etcd's unit)
// and registers self under it.
func (e *Etcd) Join(ctx context.Context, self Member, ttl time.Duration) (Session, error) {
	if self.ID == "" || strings.Contains(self.ID, "/") {
		return nil, fmt.Errorf("shard: %s: member ID %q must be non-empty and hold no /", e, self.ID)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	lease, err := e.client.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("shard: %s: grant a lease of %ds: %w", e, secs, err)
	}
	val, _ := json.Marshal(memberValue{Weight: self.Weight})
	key := e.memberKey(self.ID)
	resp, err := e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("member %q is held by a live session (another replica with this ID, or this one's last run, whose lease expires within %v)", self.ID, ttl)
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = e.client.Revoke(rctx, lease.ID)
		return nil, fmt.Errorf("shard: %s: join: %w", e, err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &etcdSession{e: e, self: self, lease: lease.ID, changed: make(chan struct{}, 1), cancel: cancel}
	s.wg.Go(func() { s.watch(wctx) })
	return s, nil
}

type etcdSession struct {
	e       *Etcd
	self    Member
	lease   clientv3.LeaseID
	changed chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// watch turns every change under the prefix into a signal on changed.
func (s *etcdSession) watch(ctx context.Context) {
	for ctx.Err() == nil {
		for range s.e.client.Watch(clientv3.WithRequireLeader(ctx), s.e.prefix+"/", clientv3.WithPrefix()) {
			select {
			case s.changed <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // the watch failed: the periodic look goes on meanwhile
		}
	}
}

func (s *etcdSession) Changed() <-chan struct{} { return s.changed }

func (s *etcdSession) Renew(ctx context.Context) error {
	resp, err := s.e.client.KeepAliveOnce(ctx, s.lease)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("shard: %s: member %q: %w (lease %x expired)", s.e, s.self.ID, ErrSessionLost, int64(s.lease))
		}
		return fmt.Errorf("shard: %s: member %q: renew the lease: %w", s.e, s.self.ID, err)
	}
	if resp.TTL <= 0 {
		return fmt.Errorf("shard: %s: member %q: %w", s.e, s.self.ID, ErrSessionLost)
	}
	return nil
}

func (s *etcdSession) Members(ctx context.Context) ([]Member, error) {
	resp, err := s.e.client.Get(ctx, s.e.prefix+"/members/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("shard: %s: read members: %w", s.e, err)
	}
	out := make([]Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var v memberValue
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("shard: %s: member key %q holds %d bytes that are not a member's JSON: %w", s.e, kv.Key, len(kv.Value), err)
		}
		out = append(out, Member{ID: strings.TrimPrefix(string(kv.Key), s.e.prefix+"/members/"), Weight: v.Weight})
	}
	return out, nil
}

func (s *etcdSession) Acquire(ctx context.Context, shard int) (uint64, bool, error) {
	key := s.e.ShardKey(shard)
	resp, err := s.e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, s.self.ID, clientv3.WithLease(s.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, false, fmt.Errorf("shard: %s: member %q: acquire shard %d: %w", s.e, s.self.ID, shard, err)
	}
	if resp.Succeeded {
		return uint64(resp.Header.Revision), true, nil
	}
	// Held: by this very session when an earlier attempt committed but
	// its answer was lost; then the term is the key's create revision.
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && clientv3.LeaseID(kvs[0].Lease) == s.lease {
		return uint64(kvs[0].CreateRevision), true, nil
	}
	return 0, false, nil
}

func (s *etcdSession) Release(ctx context.Context, shard int, term uint64) error {
	key := s.e.ShardKey(shard)
	_, err := s.e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(term))).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("shard: %s: member %q: release shard %d (term %d): %w", s.e, s.self.ID, shard, term, err)
	}
	return nil
}

// Close revokes the lease, which deletes the member key and every shard
// key at once.
func (s *etcdSession) Close(ctx context.Context) error {
	s.cancel()
	s.wg.Wait()
	if _, err := s.e.client.Revoke(ctx, s.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("shard: %s: member %q: revoke the lease (it expires on its own): %w", s.e, s.self.ID, err)
	}
	return nil
}
