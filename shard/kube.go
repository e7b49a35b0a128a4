package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Kube is a Backend over coordination.k8s.io/v1 Leases in one namespace:
// a Lease <name>-member-<id> per member, renewed by it, and a Lease
// <name>-shard-<n> per shard whose holderIdentity is its owner's
// incarnation and whose leaseTransitions is the term.
//
// Clocks: as client-go's leader election, a replica never compares another
// replica's renewTime with its own clock to decide it expired; it judges a
// member expired once it has seen its Lease unchanged (or missing) for the
// lease time by its own clock. Before taking a shard from an expired
// owner it deletes the owner's member Lease (on the version it saw), so
// that the owner's next renewal fails, or, if that renewal came first,
// the deletion fails and nothing is taken.
type Kube struct {
	leases coordclient.LeaseInterface
	ns     string
	name   string
}

const kubeGroupLabel = "shard.dbinformer.io/group"

// NewKube returns the backend of the replicas that share the namespace and
// name (a DNS label: the prefix of the Leases' names). The client needs
// get, list, watch, create, update and delete on leases in namespace.
//
// Each round of the Sharder's loop lists the member Leases, and while
// shards wait to be taken (rounds every tenth of a second) the shard
// Leases too, and writes the ones it takes: a few requests a round. Give
// it a client whose rest.Config allows 20 requests a second or more
// (controller-runtime's default; client-go's own, 5 with a burst of 10,
// stretched handoffs to several seconds in BenchmarkShardChurn), or a
// client of its own rather than the one its informers' relists share.
func NewKube(client kubernetes.Interface, namespace, name string) (*Kube, error) {
	if client == nil {
		return nil, errors.New("shard: NewKube needs a Kubernetes client")
	}
	if namespace == "" {
		return nil, errors.New("shard: NewKube needs a namespace")
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 || len(name) > 40 {
		return nil, fmt.Errorf("shard: NewKube: name %q must be a DNS label of at most 40 characters: %s", name, strings.Join(errs, "; "))
	}
	return &Kube{leases: client.CoordinationV1().Leases(namespace), ns: namespace, name: name}, nil
}

func (k *Kube) String() string { return fmt.Sprintf("kube leases %s/%s-*", k.ns, k.name) }

func (k *Kube) memberName(id string) string { return k.name + "-member-" + id }
func (k *Kube) shardName(n int) string      { return k.name + "-shard-" + strconv.Itoa(n) }

// Join creates the member's Lease; while a Lease of the same ID exists, it
// is refused (the Sharder retries): only the members that saw a Lease
// unchanged for the lease time delete it, which is what lets a missing
// member Lease mean "gone" to everyone.
func (k *Kube) Join(ctx context.Context, self Member, ttl time.Duration) (Session, error) {
	if errs := validation.IsDNS1123Subdomain(k.memberName(self.ID)); self.ID == "" || len(errs) > 0 {
		return nil, fmt.Errorf("shard: %s: member ID %q does not make a Lease name: %s", k, self.ID, strings.Join(errs, "; "))
	}
	secs := int32((ttl + time.Second - 1) / time.Second)
	now := metav1.NewMicroTime(time.Now())
	l := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: k.memberName(self.ID), Labels: map[string]string{kubeGroupLabel: k.name + "-members"},
			Annotations: map[string]string{"shard.dbinformer.io/weight": strconv.FormatFloat(self.Weight, 'g', -1, 64)}},
		Spec: coordv1.LeaseSpec{HolderIdentity: &self.ID, LeaseDurationSeconds: &secs, RenewTime: &now, AcquireTime: &now},
	}
	created, err := k.leases.Create(ctx, l, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("shard: %s: join: member %q is held by another session (a live replica with this ID, or this one's last run: the other members delete its Lease once they have seen it unchanged for the lease time %v)", k, self.ID, ttl)
	}
	if err != nil {
		return nil, fmt.Errorf("shard: %s: join as %q: %w", k, self.ID, err)
	}
	s := &kubeSession{k: k, self: self, ttl: ttl, lease: created, token: self.ID + "/" + string(created.UID), seen: map[string]observed{}, changed: make(chan struct{}, 1)}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopWatch = cancel
	s.wg.Go(func() { s.watch(wctx, ttl/3) })
	return s, nil
}

type kubeSession struct {
	k     *Kube
	self  Member
	ttl   time.Duration
	token string // holderIdentity of the shards this incarnation owns

	mu    sync.Mutex
	lease *coordv1.Lease // this member's, as last written

	seen map[string]observed // member Lease name → what this replica saw (loop goroutine only)

	// One read of each kind per round of the Sharder's loop, not one per
	// shard (loop goroutine only): Members lists the member Leases and
	// marks the shard Leases stale; the round's first Acquire lists those.
	// A round with a dozen shards to take made three dozen requests, and
	// client-go's default rate limit (5 a second) throttled handoffs to
	// 6-15 s. A list a few milliseconds old is enough: every write is
	// conditioned on the resourceVersion read (a Lease changed since is a
	// conflict, retried next round); only a member Lease missing from the
	// list, or of another UID, is read again (it may be newer than the
	// list).
	members map[string]*coordv1.Lease // by name, as Members last listed them
	shards  map[string]*coordv1.Lease // by name, nil: list again
	gone    map[string]bool           // holders found gone this round

	changed   chan struct{}
	stopWatch context.CancelFunc
	wg        sync.WaitGroup
}

// observed is a member Lease as this replica last saw it change.
type observed struct {
	rv  string // "" when missing
	uid string
	at  time.Time
}

func (s *kubeSession) Changed() <-chan struct{} { return s.changed }

// watch turns the graceful changes of the group's Leases into signals on
// changed: a member Lease created or deleted, a shard Lease released (its
// holder emptied). Not the renewals, every member's every third of a
// lease: each signal costs every replica a round of requests, and a
// renewal changes nothing a round would act on. Without it a replica saw
// a join, a leave or a release on its next periodic look only.
func (s *kubeSession) watch(ctx context.Context, retry time.Duration) {
	selector := fmt.Sprintf("%s in (%s-members,%s-shards)", kubeGroupLabel, s.k.name, s.k.name)
	for ctx.Err() == nil {
		// No resourceVersion: the watch starts with the Leases as they
		// are (an event each), so a new watch signals what it missed.
		w, err := s.k.leases.Watch(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			for ev := range w.ResultChan() {
				if l, ok := ev.Object.(*coordv1.Lease); ok && kubeChange(ev.Type, l, s.k.name) {
					select {
					case s.changed <- struct{}{}:
					default:
					}
				}
			}
			w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry): // the periodic look goes on meanwhile
		}
	}
}

// kubeChange reports whether a watch event of a group Lease is a change a
// Sharder's round acts on.
func kubeChange(t watch.EventType, l *coordv1.Lease, name string) bool {
	switch t {
	case watch.Added, watch.Deleted:
		return true
	case watch.Modified:
		released := l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
		return released && l.Labels[kubeGroupLabel] == name+"-shards"
	}
	return false
}

func (s *kubeSession) Renew(ctx context.Context) error {
	s.mu.Lock()
	l := s.lease.DeepCopy()
	s.mu.Unlock()
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	updated, err := s.k.leases.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// Only this member updates its Lease, others only delete it: a
		// conflict on the same Lease is an earlier renewal whose answer
		// was lost. Renew on what the server holds.
		cur, gerr := s.k.leases.Get(ctx, l.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			err = gerr
		case gerr != nil:
			return fmt.Errorf("shard: %s: member %q: renew: %w", s.k, s.self.ID, gerr)
		case cur.UID == l.UID:
			cur.Spec.RenewTime = &now
			updated, err = s.k.leases.Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Deleted by a replica that saw it expire (or replaced): gone.
		return fmt.Errorf("shard: %s: member %q: %w (its Lease was deleted or replaced after it looked expired)", s.k, s.self.ID, ErrSessionLost)
	}
	if err != nil {
		return fmt.Errorf("shard: %s: member %q: renew: %w", s.k, s.self.ID, err)
	}
	s.mu.Lock()
	s.lease = updated
	s.mu.Unlock()
	return nil
}

// observe records l (nil: missing) under name and reports whether it has
// stayed unchanged for the lease time.
func (s *kubeSession) observe(name string, l *coordv1.Lease) bool {
	var rv, uid string
	if l != nil {
		rv, uid = l.ResourceVersion, string(l.UID)
	}
	o, ok := s.seen[name]
	if !ok || o.rv != rv || o.uid != uid {
		s.seen[name] = observed{rv: rv, uid: uid, at: time.Now()}
		return false
	}
	return time.Since(o.at) >= s.ttl
}

func (s *kubeSession) Members(ctx context.Context) ([]Member, error) {
	list, err := s.k.leases.List(ctx, metav1.ListOptions{LabelSelector: kubeGroupLabel + "=" + s.k.name + "-members"})
	if err != nil {
		return nil, fmt.Errorf("shard: %s: read members: %w", s.k, err)
	}
	s.members = make(map[string]*coordv1.Lease, len(list.Items))
	s.shards, s.gone = nil, map[string]bool{}
	var out []Member
	for i := range list.Items {
		l := &list.Items[i]
		s.members[l.Name] = l
		// Keyed as holderGone keys it: the clock a take waits on starts
		// with the first sight of the member, not with the first take.
		if s.observe(l.Name+"@"+string(l.UID), l) {
			// Expired: delete it on the version seen (so that a late
			// renewal fails, and its ID can join again).
			uid, rv := l.UID, l.ResourceVersion
			_ = s.k.leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
			continue
		}
		id := strings.TrimPrefix(l.Name, s.k.name+"-member-")
		w, _ := strconv.ParseFloat(l.Annotations["shard.dbinformer.io/weight"], 64)
		out = append(out, Member{ID: id, Weight: w})
	}
	return out, nil
}

func (s *kubeSession) Acquire(ctx context.Context, shard int) (uint64, bool, error) {
	fail := func(err error) (uint64, bool, error) {
		return 0, false, fmt.Errorf("shard: %s: member %q: acquire shard %d: %w", s.k, s.self.ID, shard, err)
	}
	name := s.k.shardName(shard)
	if s.shards == nil {
		list, err := s.k.leases.List(ctx, metav1.ListOptions{LabelSelector: kubeGroupLabel + "=" + s.k.name + "-shards"})
		if err != nil {
			return fail(err)
		}
		s.shards = make(map[string]*coordv1.Lease, len(list.Items))
		for i := range list.Items {
			s.shards[list.Items[i].Name] = &list.Items[i]
		}
	}
	l, found := s.shards[name]
	if !found {
		one := int32(1)
		now := metav1.NewMicroTime(time.Now())
		_, err := s.k.leases.Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubeGroupLabel: s.k.name + "-shards"}},
			Spec:       coordv1.LeaseSpec{HolderIdentity: &s.token, LeaseTransitions: &one, AcquireTime: &now},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s.shards = nil
			return 0, false, nil
		}
		if err != nil {
			return fail(err)
		}
		return 1, true, nil
	}
	l = l.DeepCopy()
	holder, term := "", uint64(0)
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		term = uint64(*l.Spec.LeaseTransitions)
	}
	if holder == s.token {
		return term, true, nil
	}
	if holder != "" {
		free, err := s.holderGone(ctx, holder)
		if err != nil || !free {
			return 0, false, err
		}
	}
	next := int32(term + 1)
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions, l.Spec.AcquireTime = &s.token, &next, &now
	if _, err := s.k.leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			s.shards = nil
			return 0, false, nil
		}
		return fail(err)
	}
	return uint64(next), true, nil
}

// holderGone reports whether the incarnation holder ("id/uid") is gone:
// its member Lease missing or replaced — only a member that saw it
// unchanged for the lease time deletes another's Lease, and an owner's
// own deadline ends a lease time after its last renewal was sent, so a
// missing Lease is past its owner's deadline —, or seen unchanged for the
// lease time here: then deleted on the version seen, so that a late
// renewal fails (or, if the renewal came first, the deletion does).
func (s *kubeSession) holderGone(ctx context.Context, holder string) (bool, error) {
	if s.gone[holder] {
		return true, nil // a dead owner's other shards: once a round
	}
	gone, err := s.holderGoneRead(ctx, holder)
	if gone && s.gone != nil {
		s.gone[holder] = true
	}
	return gone, err
}

func (s *kubeSession) holderGoneRead(ctx context.Context, holder string) (bool, error) {
	id, uid, _ := strings.Cut(holder, "/")
	name := s.k.memberName(id)
	// The round's list serves when it holds this very incarnation; a
	// Lease missing from it or of another UID may have been created
	// after it was taken (a member that joined since): read it.
	l := s.members[name]
	if l == nil || string(l.UID) != uid {
		var err error
		l, err = s.k.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && string(l.UID) != uid {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("shard: %s: read the Lease of owner %q: %w", s.k, id, err)
		}
	}
	if !s.observe(name+"@"+uid, l) {
		return false, nil
	}
	u, rv := l.UID, l.ResourceVersion
	err := s.k.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &u, ResourceVersion: &rv}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		delete(s.members, name)
		return true, nil
	case apierrors.IsConflict(err):
		return false, nil // renewed meanwhile: alive
	}
	return false, fmt.Errorf("shard: %s: delete the expired Lease of owner %q: %w", s.k, id, err)
}

func (s *kubeSession) Release(ctx context.Context, shard int, term uint64) error {
	l, err := s.k.leases.Get(ctx, s.k.shardName(shard), metav1.GetOptions{})
	if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == s.token &&
		l.Spec.LeaseTransitions != nil && uint64(*l.Spec.LeaseTransitions) == term {
		empty := ""
		l.Spec.HolderIdentity = &empty
		_, err = s.k.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("shard: %s: member %q: release shard %d (term %d): %w", s.k, s.self.ID, shard, term, err)
	}
	return nil
}

// Close releases this incarnation's shards and deletes its member Lease.
func (s *kubeSession) Close(ctx context.Context) error {
	s.stopWatch()
	s.wg.Wait()
	list, err := s.k.leases.List(ctx, metav1.ListOptions{LabelSelector: kubeGroupLabel + "=" + s.k.name + "-shards"})
	if err == nil {
		for i := range list.Items {
			l := &list.Items[i]
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == s.token {
				n, _ := strconv.Atoi(strings.TrimPrefix(l.Name, s.k.name+"-shard-"))
				if rerr := s.Release(ctx, n, uint64(*l.Spec.LeaseTransitions)); rerr != nil {
					err = rerr
				}
			}
		}
	}
	s.mu.Lock()
	uid, rv := s.lease.UID, s.lease.ResourceVersion
	s.mu.Unlock()
	if derr := s.k.leases.Delete(ctx, s.lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}); derr != nil && !apierrors.IsNotFound(derr) && !apierrors.IsConflict(derr) {
		err = errors.Join(err, derr)
	}
	if err != nil {
		return fmt.Errorf("shard: %s: member %q: leave (its Lease goes stale on its own): %w", s.k, s.self.ID, err)
	}
	return nil
}
