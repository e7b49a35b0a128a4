package pginformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The session's stream: starting it, waiting for checkpointing tables to
// restore first, resuming a permanent slot's stream, and giving a session
// up. slot.go opens sessions; this file runs their stream.

// startStream ends the held snapshot (if any) and starts streaming.
// Called with s.mu not held.
func (s *Source) startStream(ctx context.Context, sess *session) error {
	s.mu.Lock()
	streaming := sess.streaming
	s.mu.Unlock()
	if streaming {
		return nil
	}
	if sess.snap != nil {
		sess.snap.release()
		sess.snap = nil
	}
	start := max(s.fan.ackPosition(), sess.cp)
	// proto_version 1: we apply whole transactions, so v2's streaming of
	// in-progress transactions (and v3/v4's two-phase and parallel
	// streaming) would only add messages we must buffer anyway.
	err := pglogrepl.StartReplication(ctx, sess.repl, pgx.Identifier{s.slot}.Sanitize(), pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			"publication_names " + quoteLiteral(pgx.Identifier{s.pub}.Sanitize()),
		},
	})
	if err != nil {
		// The connection is in an unknown state: give it up. A temporary
		// slot goes with it (every table relists); a permanent one is
		// resumed by the next Watch.
		return s.abandonSession(sess, s.wrap(fmt.Sprintf("start replication on slot %q at %s", s.slot, lsn(start)), err))
	}
	sctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	sess.cancel, sess.done, sess.streaming = cancel, make(chan struct{}), true
	gen := s.fan.started(start)
	s.mu.Unlock()
	go s.stream(sctx, sess, gen)
	return nil
}

// restoreWait bounds how long a Watch holds the stream back for the other
// checkpointing tables of its Source (awaitRestores).
const restoreWait = 2 * time.Second

// awaitRestores waits, up to restoreWait, while another table of the Source
// has a checkpointing informer (gated) and has neither restored nor listed
// yet: once the stream runs past that table's checkpoint, its Restore
// fails and it relists. Informers started together restore within
// milliseconds (as soon as their checkpoint's header is read); the bound
// keeps a table whose informer never gets there from holding the others.
func (s *Source) awaitRestores(ctx context.Context) {
	deadline := time.NewTimer(restoreWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		// Only a resumed slot (no exported snapshot): on a new one, the
		// first Lists already start the stream once every table listed.
		resumed := s.sess != nil && s.sess.resumed && !s.sess.streaming
		// A table turning active or the stream starting closes changed.
		waiting, changed := s.fan.awaitingRestore()
		s.mu.Unlock()
		if !waiting || !resumed {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-changed:
		}
	}
}

// ensureStreaming is called by Watch: the stream must run for the watch to
// get anything. setupMu is not held.
func (s *Source) ensureStreaming(ctx context.Context) error {
	// Fast path: a long List of another table holds setupMu.
	s.mu.Lock()
	running := s.sess != nil && s.sess.streaming && !s.closed
	s.mu.Unlock()
	if running {
		return nil
	}
	s.awaitRestores(ctx)
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	s.mu.Lock()
	sess, closed, resumable := s.sess, s.closed, s.resumable
	s.mu.Unlock()
	if closed {
		return errClosed
	}
	if sess == nil {
		if resumable {
			return s.resume(ctx)
		}
		return fmt.Errorf("postgres %s: no replication slot: %w", s.where(), driver.ErrExpired)
	}
	return s.startStream(ctx, sess)
}

// resume restarts the stream of a permanent slot after its connection
// ended, from the confirmed position, keeping every table's state.
func (s *Source) resume(ctx context.Context) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	var walStatus *string
	err = conn.QueryRow(ctx, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&walStatus)
	conn.Close(context.Background())
	if errors.Is(err, pgx.ErrNoRows) || err == nil && walStatus != nil && *walStatus == "lost" {
		err := fmt.Errorf("postgres %s: replication slot %q is gone or lost its WAL: %w", s.where(), s.slot, driver.ErrExpired)
		s.mu.Lock()
		s.resumable = false
		s.fan.fail(err, true)
		s.mu.Unlock()
		return err
	}
	if err != nil {
		return s.wrap("look up replication slot", err)
	}
	repl, err := s.connectRepl(ctx)
	if err != nil {
		return err
	}
	ns := &session{repl: repl, listed: map[*tableState]bool{}}
	s.mu.Lock()
	// Installed before the stream starts, so that a stream that fails at
	// once finds itself current and marks the slot resumable again.
	ns.cp = s.fan.position()
	s.sess, s.resumable = ns, false
	s.mu.Unlock()
	if err := s.startStream(ctx, ns); err != nil {
		return err // startStream tore ns down and marked the slot resumable
	}
	s.log.Info("replication stream resumed", "slot", s.slot, "from", lsn(ns.cp))
	return nil
}

// abandonSession gives up sess, whose replication connection is gone or
// in an unknown state, and returns err as its watches see it: a temporary
// slot goes with the connection (every table relists), a permanent one is
// resumed by the next List or Watch. Called with s.mu not held.
func (s *Source) abandonSession(sess *session, err error) error {
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	if s.opts.PermanentSlot {
		s.resumable = true
		s.fan.fail(err, false)
	} else {
		err = fmt.Errorf("%w: %w", err, driver.ErrExpired)
		s.fan.fail(err, true)
	}
	s.mu.Unlock()
	s.endSession(sess)
	return err
}

// endSession stops sess's stream and closes its connection.
func (s *Source) endSession(sess *session) {
	if sess.snapTimer != nil {
		sess.snapTimer.Stop()
	}
	if sess.cancel != nil {
		sess.cancel()
		<-sess.done
	}
	if sess.snap != nil {
		sess.snap.release()
	}
	if sess.repl != nil {
		sess.repl.Close(context.Background())
	}
}
