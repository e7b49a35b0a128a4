package pginformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The walsender loop: receive pgoutput, report the applied position, and
// hand each committed transaction to the tables it touched.

// pendingTxn collects one transaction's changes per table. A transaction
// touches few tables: a short list beats a map looked up per row.
type pendingTxn struct {
	commit  core.ResourceVersion // commit record start (Begin.FinalLSN)
	tables  []*tableState
	changes [][]wal.Change // per entry of tables
}

func (p *pendingTxn) add(ts []*tableState, c wal.Change) {
next:
	for _, t := range ts {
		for i, have := range p.tables {
			if have == t {
				p.changes[i] = append(p.changes[i], c)
				continue next
			}
		}
		p.tables = append(p.tables, t)
		p.changes = append(p.changes, []wal.Change{c})
	}
}

// stream reads the replication stream until ctx ends or it fails.
func (s *Source) stream(ctx context.Context, sess *session, gen uint64) {
	defer close(sess.done)
	// The guard ends with the stream; its last statement may outlive it
	// briefly (guardQueryTimeout), which Close waits for.
	gctx, stopGuard := context.WithCancel(ctx)
	s.guards.Go(func() { s.guard(gctx) })
	err := s.streamLoop(ctx, sess)
	stopGuard()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fan.current(gen) {
		return // closed, or superseded: nothing to report
	}
	at := s.fan.position()
	if ctx.Err() != nil && err == nil {
		err = errors.New("stream stopped")
	}
	temporary := !s.opts.PermanentSlot
	if temporary {
		err = fmt.Errorf("postgres %s: replication stream of temporary slot %q ended at %s (the server dropped the slot with its connection): %w: %w", s.where(), s.slot, lsn(at), driver.ErrExpired, err)
	} else {
		err = fmt.Errorf("postgres %s: replication stream of slot %q ended at %s: %w", s.where(), s.slot, lsn(at), err)
		s.resumable = true
	}
	if s.sess == sess {
		s.sess = nil
	}
	go s.endSession(sess)
	s.log.Warn("replication stream ended", "slot", s.slot, "err", err)
	s.fan.fail(err, temporary)
}

// relEntry is what the stream knows of a relation id: its column layout
// (nil until its Relation message) and the tables registered for it. The
// table set is frozen before any stream starts, so the entry is built once
// per Relation message instead of looked up under the lock per row.
type relEntry struct {
	rel    *wal.Relation
	tables []*tableState
}

// Receive and status cadence of the stream loop.
const (
	// statusCheckEvery bounds how often the loop looks at the applied
	// position and the progress requests while messages keep coming.
	statusCheckEvery = 10 * time.Millisecond
	// ackEvery: a moved applied position is reported at most this often.
	ackEvery = 100 * time.Millisecond
	// silentIntervals: a stream that received nothing at all (no change,
	// no keepalive) for this many status intervals, though a keepalive
	// was requested after the first, ends as half-open (but see
	// silenceLimit).
	silentIntervals = driver.StuckIntervals
)

// errHalfOpen is matched by the error with which a stream that heard
// nothing from the server ends.
var errHalfOpen = errors.New("the replication connection looks half-open")

// streamLoop receives the replication stream, reports the applied position
// and ends a session that hears nothing, until ctx ends (nil) or the stream
// fails. The status checks and the CopyData messages are parts of their
// own (streamStatus, copyData); the loop keeps their order: the status is
// looked at before each receive.
func (s *Source) streamLoop(ctx context.Context, sess *session) error {
	relations := map[uint32]*relEntry{}
	var txn *pendingTxn
	var arena wal.Arena
	ss := &streamStatus{lastRecv: time.Now()}
	batch := newReadBatcher(sess.repl.Conn(), ss.lastRecv)
	// One receive context serves many messages: a fresh one per message
	// costs a timer, an AfterFunc and their allocations on every row. It
	// expires every ackEvery so that the loop reports the applied position
	// and looks for silence (every batchWait while reads are batched: see
	// readbatch.go); a progress request cancels it (s.wake).
	var rctx context.Context
	rcancel := context.CancelFunc(func() {})
	defer func() {
		s.fan.setWake(nil)
		rcancel()
	}()
	for {
		now := time.Now()
		woken := rctx == nil || rctx.Err() != nil
		if woken || !now.Before(ss.checkAt) {
			ss.checkAt = now.Add(statusCheckEvery)
			if batch.adjust(now) {
				// The receive bound changed: the next receive takes it.
				woken = true
			}
			if err := s.checkStatus(ctx, sess, ss, now); err != nil {
				return err
			}
		}
		if woken {
			rcancel()
			rctx, rcancel = context.WithTimeout(ctx, batch.receiveWait(ackEvery))
			s.fan.setWake(rcancel)
		}
		msg, err := sess.repl.ReceiveMessage(rctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if rctx.Err() != nil || pgconn.Timeout(err) {
				continue
			}
			return err
		}
		ss.lastRecv, ss.probed = time.Now(), false
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("server ended the replication stream")
		case *pgproto3.CopyData:
			batch.received(len(msg.Data))
			if len(msg.Data) == 0 {
				continue
			}
			if txn, err = s.copyData(msg.Data, ss, relations, txn, &arena); err != nil {
				return err
			}
		}
	}
}

// streamStatus is the stream loop's record of what it last sent and
// received, which decides when it reports the applied position, asks for a
// keepalive, and gives the session up as half-open.
type streamStatus struct {
	lastSent   core.ResourceVersion
	lastSentAt time.Time
	checkAt    time.Time // the next status check while messages keep coming
	lastRecv   time.Time
	probed     bool // a keepalive was requested since lastRecv
}

// checkStatus is the stream loop's periodic look at the connection: it ends
// a session silent past s.silence, asks a quiet server for a keepalive, and
// sends the standby status update (applied position, progress replies).
func (s *Source) checkStatus(ctx context.Context, sess *session, ss *streamStatus, now time.Time) error {
	if silent := now.Sub(ss.lastRecv); silent >= s.silence {
		return fmt.Errorf("%w: nothing received from the server for %v though a keepalive was requested (limit %v: %d status intervals of %v, and at least half the server's wal_sender_timeout plus two); ending the session to reconnect", errHalfOpen, silent.Round(time.Millisecond), s.silence, silentIntervals, s.interval)
	} else if silent >= s.interval && !ss.probed {
		// Quiet for a whole interval: ask for a keepalive, which a
		// live server answers at once.
		s.fan.probe()
		ss.probed = true
	}
	reply, req, ack := s.fan.takeProgressRequest()
	// Report a moved position promptly but at most every ackEvery,
	// and the same position every interval (it is also our
	// keepalive).
	since := now.Sub(ss.lastSentAt)
	if reply || since >= s.interval || ack != ss.lastSent && since >= ackEvery {
		err := pglogrepl.SendStandbyStatusUpdate(ctx, sess.repl, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: pglogrepl.LSN(ack),
			WALFlushPosition: pglogrepl.LSN(ack),
			WALApplyPosition: pglogrepl.LSN(ack),
			ClientTime:       now,
			ReplyRequested:   reply,
		})
		if err != nil {
			return fmt.Errorf("send standby status: %w", err)
		}
		ss.lastSent, ss.lastSentAt = ack, now
		if reply {
			s.fan.progressSent(req)
		}
	}
	return nil
}

// copyData handles one non-empty CopyData message of the stream: a primary
// keepalive, or WAL data (a pgoutput message, see handle). It returns the
// transaction open after it.
func (s *Source) copyData(data []byte, ss *streamStatus, relations map[uint32]*relEntry, txn *pendingTxn, arena *wal.Arena) (*pendingTxn, error) {
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return txn, err
		}
		if ka.ReplyRequested {
			ss.lastSentAt, ss.checkAt = time.Time{}, time.Time{}
		}
		if txn == nil {
			// Everything before the server's WAL end has been sent
			// to us; with no transaction open, nothing below it is
			// pending.
			// A keepalive after a reply was requested answers the
			// requests made before it.
			s.fan.keepalive(core.ResourceVersion(ka.ServerWALEnd))
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return txn, err
		}
		return s.handle(xld.WALData, relations, txn, arena)
	}
	return txn, nil
}

// handle applies one pgoutput message.
func (s *Source) handle(data []byte, relations map[uint32]*relEntry, txn *pendingTxn, arena *wal.Arena) (*pendingTxn, error) {
	if len(data) == 0 {
		return txn, errors.New("empty pgoutput message")
	}
	switch data[0] {
	case 'I', 'U', 'D':
		// The rows: parsed here, without pglogrepl's per-column objects.
		id, c, err := wal.ParseChange(data, arena)
		if err != nil {
			return txn, fmt.Errorf("parse pgoutput message: %w", err)
		}
		if txn != nil {
			e := s.relationEntry(relations, id)
			c.Rel = e.rel
			txn.add(e.tables, c)
		}
		return txn, nil
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return txn, fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		return &pendingTxn{commit: core.ResourceVersion(m.FinalLSN)}, nil
	case *pglogrepl.RelationMessage:
		e := s.relationEntry(relations, m.RelationID)
		rel := wal.NewRelation(m)
		relations[m.RelationID] = &relEntry{rel: rel, tables: e.tables}
		// The layout applies from this transaction on: a change from what
		// a Table proved holds its watches back here (schema.go).
		at := s.fan.position() + 1
		if txn != nil {
			at = txn.commit
		}
		for _, t := range e.tables {
			if sc := s.fan.relation(&t.feed, rel, at); sc != nil {
				s.logSchemaChange(sc)
			}
		}
	case *pglogrepl.TruncateMessage:
		if txn != nil {
			for _, id := range m.RelationIDs {
				txn.add(s.relationEntry(relations, id).tables, wal.Change{Kind: wal.Truncate})
			}
		}
	case *pglogrepl.CommitMessage:
		if txn == nil {
			return nil, nil
		}
		s.fan.commit(core.ResourceVersion(m.TransactionEndLSN), txn.commit, txn.tables, txn.changes)
		return nil, nil
	}
	return txn, nil
}

// relationEntry returns what the stream knows of a relation id, looking
// its tables up once.
func (s *Source) relationEntry(relations map[uint32]*relEntry, id uint32) *relEntry {
	if e := relations[id]; e != nil {
		return e
	}
	s.mu.Lock()
	e := &relEntry{tables: s.byOID[id]}
	s.mu.Unlock()
	relations[id] = e
	return e
}
