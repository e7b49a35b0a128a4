package shard

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgListener is a Postgres session's Changed: a connection of its own (not
// one of the caller's pool, which it would hold for the session's life)
// LISTENs on the backend's channel, and every notification — a member
// joined or left, a shard was released — becomes a signal. Without it a
// replica saw a graceful change on its next periodic look only, up to a
// third of the lease later, once for the leaving owner's release and
// again for the taker. Best effort, as Changed is: while the connection
// is down the periodic look goes on, and a new connection signals once
// for whatever it missed.
type pgListener struct {
	changed chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// channel is the LISTEN/NOTIFY channel of the backend's replicas.
func (p *Postgres) channel() string { return p.name + "_changes" }

// listen starts the listener; retry is the wait after a failed connection.
func (p *Postgres) listen(retry time.Duration) *pgListener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &pgListener{changed: make(chan struct{}, 1), cancel: cancel}
	cfg := p.pool.Config().ConnConfig.Copy()
	l.wg.Go(func() {
		for ctx.Err() == nil {
			l.session(ctx, cfg, p.channel())
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
		}
	})
	return l
}

// session is one connection's LISTEN, until it fails or ctx ends.
func (l *pgListener) session(ctx context.Context, cfg *pgx.ConnConfig, channel string) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// channel is the backend's name (a checked identifier) and a suffix.
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return
	}
	l.signal() // what changed while no connection listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return
		}
		l.signal()
	}
}

func (l *pgListener) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// stop ends the listener and waits for its goroutine.
func (l *pgListener) stop() {
	l.cancel()
	l.wg.Wait()
}

// notify tells the backend's listening replicas that members or owners
// changed (after the change committed). Best effort: a replica that misses
// it sees the change on its next periodic look.
func (p *Postgres) notify(ctx context.Context) {
	_, _ = p.pool.Exec(ctx, "SELECT pg_notify($1, '')", p.channel())
}
