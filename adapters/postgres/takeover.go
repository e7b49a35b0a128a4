package pginformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// takeOverWait bounds how long TakeOverSlot waits for the terminated
// walsender to exit and release the slot.
const takeOverWait = 5 * time.Second

// TakeOverSlot ends the walsender that holds this Source's permanent slot
// on behalf of another process, so that this Source can stream from it:
// a frozen or cut-off process keeps its replication connection, and its
// walsender keeps the slot ("replication slot is active for PID"), until
// wal_sender_timeout (60s by default) — a timeout the new holder's user
// cannot see from their side. It does nothing when the slot is free or
// held by this Source's own replication connection.
//
// Call it only once the other process is fenced off — it no longer leads
// (leader.Elector) and can no longer publish (the relay's expected-last-
// sequence publish fails once the new term wrote) — or the two processes
// take the slot from each other in turn. The relay calls it at the start
// of each term, after the term's first message is stored.
//
// The role needs the right to signal the walsender: the same role as the
// other process, or membership in pg_signal_backend.
func (s *Source) TakeOverSlot(ctx context.Context) error {
	if !s.opts.PermanentSlot {
		return nil // a temporary slot belongs to one connection
	}
	s.mu.Lock()
	var own uint32
	if s.sess != nil && s.sess.repl != nil {
		own = s.sess.repl.PID()
	}
	s.mu.Unlock()
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer s.release(conn)
	var pid *int32
	if err := conn.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&pid); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // no slot yet: the first session creates it
		}
		return s.wrap(fmt.Sprintf("look up the holder of replication slot %q", s.slot), err)
	}
	if pid == nil || uint32(*pid) == own {
		return nil
	}
	s.log.Warn("replication slot held by another process's walsender; terminating it (that process is no longer the leader)", "slot", s.slot, "pid", *pid)
	var ok bool
	// pg_terminate_backend(pid, timeout) (Postgres 14) waits for the
	// backend to exit; the slot is free once it has.
	err = conn.QueryRow(ctx, "SELECT pg_terminate_backend($1, $2)", *pid, takeOverWait.Milliseconds()).Scan(&ok)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42883" {
		// Before Postgres 14: no timeout argument; poll for the exit.
		err = conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", *pid).Scan(&ok)
		if err == nil {
			err = s.awaitSlotFree(ctx, conn)
		}
	}
	if err != nil {
		return s.wrap(fmt.Sprintf("terminate walsender %d holding replication slot %q (the role needs to be the same as that process's or a member of pg_signal_backend)", *pid, s.slot), err)
	}
	if !ok {
		return fmt.Errorf("postgres %s: walsender %d holding replication slot %q did not exit within %v", s.where(), *pid, s.slot, takeOverWait)
	}
	return nil
}

// awaitSlotFree polls until the slot has no active walsender, up to
// takeOverWait (for servers whose pg_terminate_backend cannot wait).
func (s *Source) awaitSlotFree(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(takeOverWait)
	for {
		var active bool
		err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !active {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replication slot %q still active %v after its walsender was terminated", s.slot, takeOverWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TakeOverSlot is its Source's (Source.TakeOverSlot), so that a relay
// holding only the table finds it.
func (t *Table[T]) TakeOverSlot(ctx context.Context) error { return t.src.TakeOverSlot(ctx) }
