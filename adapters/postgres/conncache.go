package pginformer

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// connCache keeps the connection of the last short catalog query for the
// next one, for idleConnFor: a connection costs a server process and an
// authentication (SCRAM: a few milliseconds of CPU on each side), and a
// start makes several in a row (NewSource, NewTable, then Head and the
// session's catalog queries while a warm start reads its checkpoint).
type connCache struct {
	mu     sync.Mutex
	idle   *pgx.Conn
	timer  *time.Timer
	closed bool
}

const idleConnFor = 2 * time.Second

// take returns the idle connection, if any.
func (c *connCache) take() *pgx.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn := c.idle
	c.idle = nil
	return conn
}

// put keeps conn for the next take, or closes it: when one is kept
// already, when the cache is closed, or when conn is closed or in a
// transaction.
func (c *connCache) put(conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		closeConn(conn)
		return
	}
	c.mu.Lock()
	if c.closed || c.idle != nil {
		c.mu.Unlock()
		closeConn(conn)
		return
	}
	c.idle = conn
	if c.timer == nil {
		c.timer = time.AfterFunc(idleConnFor, c.expire)
	} else {
		c.timer.Reset(idleConnFor)
	}
	c.mu.Unlock()
}

// expire closes the idle connection.
func (c *connCache) expire() {
	if conn := c.take(); conn != nil {
		closeConn(conn)
	}
}

// closeConn closes conn, waiting at most a few seconds for the server to
// take the goodbye (a dead network must not hold the caller).
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn.Close(ctx)
}

// close closes the idle connection and keeps none from now on.
func (c *connCache) close() {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.expire()
}
