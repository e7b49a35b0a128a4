package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// KubeOptions configures a Kubernetes Lease election. The durations are
// client-go leaderelection's; zero means DefaultLease, two thirds of the
// lease duration and a fifth of it.
type KubeOptions struct {
	// Identity is the Lease's holderIdentity; empty means a random one.
	Identity string
	// LeaseDuration is how long other candidates wait after the last
	// renewal before taking over.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before
	// giving up the leadership (its lead context is cancelled then).
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try.
	RetryPeriod time.Duration
	// Logger receives election errors and transitions; nil discards them.
	Logger *slog.Logger
}

// Kube is an Elector over a coordination.k8s.io/v1 Lease, through
// client-go's leaderelection.
type Kube struct {
	client    kubernetes.Interface
	namespace string
	name      string
	opts      KubeOptions
}

// NewKube returns an election on the Lease namespace/name (created if
// missing; the client needs get, create and update on leases there).
func NewKube(client kubernetes.Interface, namespace, name string, opts KubeOptions) (*Kube, error) {
	if client == nil {
		return nil, errors.New("leader: NewKube needs a Kubernetes client")
	}
	if namespace == "" || name == "" {
		return nil, errors.New("leader: NewKube needs the Lease's namespace and name")
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLease
	}
	if opts.RenewDeadline == 0 {
		opts.RenewDeadline = opts.LeaseDuration * 2 / 3
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = opts.LeaseDuration / 5
	}
	if opts.Identity == "" {
		opts.Identity = randomIdentity()
	}
	k := &Kube{client: client, namespace: namespace, name: name, opts: opts}
	if _, err := k.elector(func(context.Context) {}); err != nil {
		return nil, fmt.Errorf("leader: %s: %w", k.what(), err)
	}
	return k, nil
}

// Run: see Elector.
func (k *Kube) Run(ctx context.Context, lead func(context.Context, Term) error) error {
	return run(ctx, k, k.opts.Logger, lead)
}

func (k *Kube) what() string { return fmt.Sprintf("kubernetes lease %s/%s", k.namespace, k.name) }

func (k *Kube) lock() *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: k.namespace, Name: k.name},
		Client:     k.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: k.opts.Identity},
	}
}

func (k *Kube) elector(started func(context.Context)) (*leaderelection.LeaderElector, error) {
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            k.lock(),
		LeaseDuration:   k.opts.LeaseDuration,
		RenewDeadline:   k.opts.RenewDeadline,
		RetryPeriod:     k.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            k.name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: started,
			OnStoppedLeading: func() {},
		},
	})
}

func (k *Kube) campaign(ctx context.Context) (*held, error) {
	started := make(chan context.Context, 1)
	le, err := k.elector(func(lctx context.Context) { started <- lctx })
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		le.Run(rctx)
	}()
	var lctx context.Context
	select {
	case lctx = <-started:
	case <-ran:
		cancel()
		return nil, errors.New("the elector stopped before it was elected")
	case <-ctx.Done():
		cancel()
		<-ran
		return nil, ctx.Err()
	}
	stop := func() {
		cancel()
		<-ran
	}
	rec, _, err := k.lock().Get(ctx)
	if err != nil {
		stop()
		return nil, fmt.Errorf("read the lease after taking it: %w", err)
	}
	if rec.HolderIdentity != k.opts.Identity {
		stop()
		return nil, fmt.Errorf("the lease is held by %q right after this candidate took it", rec.HolderIdentity)
	}
	return &held{
		term:   Term{Epoch: uint64(rec.LeaderTransitions) + 1, Identity: k.opts.Identity},
		lost:   lctx.Done(),
		resign: stop,
	}, nil
}
