package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// EtcdOptions configures an etcd election.
type EtcdOptions struct {
	// Identity is stored as the leader key's value; empty means a random
	// one.
	Identity string
	// TTL is the session lease: a leader that cannot reach etcd loses its
	// leadership (its lead context is cancelled) at most this long after
	// its last successful keep-alive, and another candidate is elected
	// once the lease expires (a frozen or cut-off leader's keep-alives
	// stop). Zero means DefaultLease; below one second is refused.
	TTL time.Duration
	// Logger receives election errors and transitions; nil discards them.
	Logger *slog.Logger
}

// Etcd is an Elector over etcd's concurrency.Election.
type Etcd struct {
	client *clientv3.Client
	prefix string
	opts   EtcdOptions
}

// NewEtcd returns an election among the candidates that use the same
// client cluster and key prefix. The client is the caller's.
func NewEtcd(client *clientv3.Client, prefix string, opts EtcdOptions) (*Etcd, error) {
	if client == nil {
		return nil, errors.New("leader: NewEtcd needs an etcd client")
	}
	if prefix == "" {
		return nil, errors.New("leader: NewEtcd needs a key prefix (for example \"/myapp/leader\")")
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultLease
	}
	if opts.TTL < time.Second {
		return nil, fmt.Errorf("leader: etcd election %q: EtcdOptions.TTL %v is below etcd's granularity of one second", prefix, opts.TTL)
	}
	if opts.Identity == "" {
		opts.Identity = randomIdentity()
	}
	return &Etcd{client: client, prefix: prefix, opts: opts}, nil
}

// Run: see Elector.
func (e *Etcd) Run(ctx context.Context, lead func(context.Context, Term) error) error {
	return run(ctx, e, e.opts.Logger, lead)
}

func (e *Etcd) what() string { return fmt.Sprintf("etcd election %q", e.prefix) }

func (e *Etcd) campaign(ctx context.Context) (*held, error) {
	s, err := concurrency.NewSession(e.client, concurrency.WithTTL(int((e.opts.TTL+time.Second-1)/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	el := concurrency.NewElection(s, e.prefix)
	if err := el.Campaign(ctx, e.opts.Identity); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("campaign: %w", err)
	}
	// The session may have died while campaigning (Campaign only returns
	// once the key is ours, but the lease can expire meanwhile).
	select {
	case <-s.Done():
		_ = s.Close()
		return nil, errors.New("session expired while campaigning")
	default:
	}
	return &held{
		term: Term{Epoch: uint64(el.Rev()), Identity: e.opts.Identity},
		lost: s.Done(),
		resign: func() {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = el.Resign(rctx)
			_ = s.Close()
		},
	}, nil
}
