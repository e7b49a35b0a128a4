package pginformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The walsender loop: receive pgoutput, report the applied position, and
// hand each committed transaction to the tables it touched.

// pendingTxn collects one transaction's changes per table.
type pendingTxn struct {
	commit  core.ResourceVersion // commit record start (Begin.FinalLSN)
	changes map[*tableState][]change
}

func (p *pendingTxn) add(ts []*tableState, c change) {
	for _, t := range ts {
		p.changes[t] = append(p.changes[t], c)
	}
}

// stream reads the replication stream until ctx ends or it fails.
func (s *Source) stream(ctx context.Context, sess *session, gen uint64) {
	defer close(sess.done)
	err := s.streamLoop(ctx, sess)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return // closed, or superseded: nothing to report
	}
	if ctx.Err() != nil && err == nil {
		err = errors.New("stream stopped")
	}
	temporary := !s.opts.PermanentSlot
	if temporary {
		err = fmt.Errorf("postgres %s: replication stream of temporary slot %q ended at %s (the server dropped the slot with its connection): %w: %w", s.where(), s.slot, lsn(s.pos), core.ErrExpired, err)
	} else {
		err = fmt.Errorf("postgres %s: replication stream of slot %q ended at %s: %w", s.where(), s.slot, lsn(s.pos), err)
		s.resumable = true
	}
	if s.sess == sess {
		s.sess = nil
	}
	go s.endSession(sess)
	s.log.Warn("replication stream ended", "slot", s.slot, "err", err)
	s.failLocked(err, temporary)
}

func (s *Source) streamLoop(ctx context.Context, sess *session) error {
	relations := map[uint32]*relation{}
	var txn *pendingTxn
	var lastSent core.ResourceVersion
	lastSentAt := time.Time{}
	for {
		s.mu.Lock()
		ack := s.ackLocked()
		reply, req := s.progressReq, s.progressSeq
		s.progressReq = false
		s.mu.Unlock()
		// Report a moved position promptly but at most every 100ms, and
		// the same position every interval (it is also our keepalive).
		since := time.Since(lastSentAt)
		if reply || since >= s.interval || ack != lastSent && since >= 100*time.Millisecond {
			err := pglogrepl.SendStandbyStatusUpdate(ctx, sess.repl, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: pglogrepl.LSN(ack),
				WALFlushPosition: pglogrepl.LSN(ack),
				WALApplyPosition: pglogrepl.LSN(ack),
				ClientTime:       time.Now(),
				ReplyRequested:   reply,
			})
			if err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
			lastSent, lastSentAt = ack, time.Now()
			if reply {
				s.mu.Lock()
				s.progressSent = req
				s.mu.Unlock()
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		msg, err := sess.repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				continue
			}
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("server ended the replication stream")
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return err
				}
				if ka.ReplyRequested {
					lastSentAt = time.Time{}
				}
				if txn == nil {
					// Everything before the server's WAL end has been sent
					// to us; with no transaction open, nothing below it is
					// pending.
					s.mu.Lock()
					if rv := core.ResourceVersion(ka.ServerWALEnd); rv > s.pos {
						s.pos = rv
					}
					// A keepalive after a reply was requested answers the
					// requests made before it.
					s.progressDone = s.progressSent
					s.notifyLocked()
					s.mu.Unlock()
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return err
				}
				txn, err = s.handle(xld.WALData, relations, txn)
				if err != nil {
					return err
				}
			}
		}
	}
}

// handle applies one pgoutput message.
func (s *Source) handle(data []byte, relations map[uint32]*relation, txn *pendingTxn) (*pendingTxn, error) {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return txn, fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		return &pendingTxn{commit: core.ResourceVersion(m.FinalLSN), changes: map[*tableState][]change{}}, nil
	case *pglogrepl.RelationMessage:
		relations[m.RelationID] = newRelation(m)
	case *pglogrepl.InsertMessage:
		if ts, rel := s.lookup(relations, m.RelationID); txn != nil {
			txn.add(ts, change{kind: changeInsert, rel: rel, new: tupleOf(m.Tuple)})
		}
	case *pglogrepl.UpdateMessage:
		if ts, rel := s.lookup(relations, m.RelationID); txn != nil {
			c := change{kind: changeUpdate, rel: rel, new: tupleOf(m.NewTuple)}
			if m.OldTuple != nil {
				c.old, c.oldKind = tupleOf(m.OldTuple), m.OldTupleType
			}
			txn.add(ts, c)
		}
	case *pglogrepl.DeleteMessage:
		if ts, rel := s.lookup(relations, m.RelationID); txn != nil {
			txn.add(ts, change{kind: changeDelete, rel: rel, old: tupleOf(m.OldTuple), oldKind: m.OldTupleType})
		}
	case *pglogrepl.TruncateMessage:
		if txn != nil {
			for _, id := range m.RelationIDs {
				ts, _ := s.lookup(relations, id)
				txn.add(ts, change{kind: changeTruncate})
			}
		}
	case *pglogrepl.CommitMessage:
		if txn == nil {
			return nil, nil
		}
		rv := core.ResourceVersion(m.TransactionEndLSN)
		s.mu.Lock()
		if rv > s.lastTxn { // on a resumed stream, skip what we had
			for t, cs := range txn.changes {
				switch {
				case !t.active:
				case rv <= t.covered:
					// Listed by a helper snapshot the stream had not
					// reached: the table has this transaction already.
					t.floor = max(t.floor, rv)
				default:
					t.batches = append(t.batches, &batch{rv: rv, commitLSN: txn.commit, changes: cs, size: len(cs)})
				}
			}
			s.lastTxn = rv
		}
		if rv > s.pos {
			s.pos = rv
		}
		s.notifyLocked()
		s.mu.Unlock()
		return nil, nil
	}
	return txn, nil
}

// lookup finds the registered tables of a relation. Whether a table is
// active (listed) is decided at commit, under the lock that also moves pos,
// so a table activated mid-transaction still gets that transaction.
func (s *Source) lookup(relations map[uint32]*relation, id uint32) ([]*tableState, *relation) {
	s.mu.Lock()
	ts := s.byOID[id]
	s.mu.Unlock()
	if ts == nil {
		return nil, nil
	}
	return ts, relations[id]
}

// requestProgress asks the server for a keepalive carrying its WAL end,
// and returns the request's number: progressDone reaches it once a
// keepalive after the request arrived.
func (s *Source) requestProgress() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progressReq = true
	s.progressSeq++
	return s.progressSeq
}
