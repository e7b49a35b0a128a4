package natsinformer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core/driver"
)

// streamReader is what the Lists and watches of both modes share: the stream,
// the filter, the connection, and the reads that must be answered by the
// stream's leader.
//
// In a cluster, three kinds of read answer differently. STREAM.INFO and
// STREAM.MSG.GET are answered by the stream leader only (a member answers
// STREAM.INFO with its own state only while the group has no leader, which
// its ClusterInfo shows with an empty Leader: such answers are retried).
// DIRECT.GET (what nats.go's Stream.GetMsg uses on a bucket, which allows
// direct gets) is answered by any replica, possibly one that has not
// stored the newest messages yet. A consumer reads the store of the node
// it is placed on, which may lag the leader too. So every version the
// adapter reports is either one its consumer has delivered everything up
// to, or one the leader has shown that nothing the filter matches lies
// between the consumer's position and it: the head comes from STREAM.INFO,
// the "nothing pending" proof from STREAM.MSG.GET with next_by_subj, both
// leader-only. On a single server both are exact as well.
type streamReader struct {
	source string // for errors: `nats kv bucket "x"`
	name   string // the stream's name
	stream jetstream.Stream
	nc     *nats.Conn
	api    string // JetStream API prefix, "$JS.API." by default
	filter string // subject filter of what is watched
	// filters, when set (more than one), replace filter: the consumer
	// takes them all and every proof asks about each.
	filters []string
	batch   int
	idle    time.Duration // <= 0: no idle checks
	log     *slog.Logger
	id      identity
	// relocateAt is relocateMin, lowered by tests.
	relocateAt uint64
	// supersedes: the stream keeps at most MaxMsgsPerSubject messages of
	// a subject (a bucket keeps History), so a message a reader has not
	// reached yet can be removed by a later one of its subject: a skipped
	// sequence may be a change whose successor is still to come (see
	// driver.SupersededSkipper).
	supersedes bool
}

func (r *streamReader) init(js jetstream.JetStream, stream jetstream.Stream, source, filter string, batch int, idle time.Duration, log *slog.Logger) {
	r.source, r.name, r.stream, r.nc, r.filter = source, stream.CachedInfo().Config.Name, stream, js.Conn(), filter
	r.api = apiPrefix(js.Options())
	if r.nc != nil {
		stateOf(r.nc).chain(r.nc)
	}
	r.batch, r.idle, r.log = batch, idle, log
	r.supersedes = stream.CachedInfo().Config.MaxMsgsPerSubject > 0
	r.relocateAt = relocateMin
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
}

// apiPrefix is the subject prefix of the JetStream API as nats.go builds it.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if !strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	}
	return jetstream.DefaultAPIPrefix
}

const (
	// requestTimeout bounds one request: a request lost with a dropped
	// connection gets no answer, and the caller's context may have a far
	// deadline or none. retry gives a first attempt firstRequestTimeout,
	// doubling up to requestTimeout: a request lost while the connection
	// or the stream's leader changed is repeated within a second (with 5s
	// for every attempt, a restart or a step-down cost 5s of staleness
	// each time), while a server that is slow to answer still gets 5s.
	requestTimeout      = 5 * time.Second
	firstRequestTimeout = time.Second
	// clusterRetry bounds how long a request that fails for a reason a
	// cluster recovers from on its own (no leader yet, no responders while
	// a consumer is placed, a timeout across a step-down) is retried before
	// its error is returned. A JetStream leader election takes a few
	// seconds; a killed leader is noticed after several.
	clusterRetry = 30 * time.Second
	// lostTimeout bounds the lost-value lookups of one check.
	lostTimeout = 60 * time.Second
)

// errNoLeader: a stream info answered while the stream had no leader, by
// a member whose state may be stale.
var errNoLeader = errors.New("the stream has no leader at the moment (answered by a replica)")

// transient reports whether err is one a cluster recovers from by itself,
// so that the request is worth repeating.
func transient(err error) bool {
	switch {
	case errors.Is(err, errNoLeader),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrNoHeartbeat),
		errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10008, // JetStream system temporarily unavailable
			10004, // incomplete results
			10005, // no suitable peers for placement
			10007, // cluster not assigned to this server
			10009, // cluster can not handle request
			10023, // insufficient resources
			10118, // stream is offline
			10119, // consumer is offline
			10194, // stream is offline: reason
			10195, // consumer is offline: reason
			10202: // cluster member change in progress
			return true
		}
		return api.Code == 503 || api.Code == 408
	}
	return false
}

// fatal turns an error that no retry can cure into a driver.Permanent one:
// the stream (bucket) is gone, or the connection was closed by its owner.
func (r *streamReader) fatal(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, driver.ErrPermanent) {
		return err
	}
	var api *jetstream.APIError
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamNotFound {
		return driver.Permanent(fmt.Errorf("%s was deleted: %w", r.source, err))
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		var ce *connDownError
		if errors.As(err, &ce) { // says why it was closed
			return driver.Permanent(fmt.Errorf("%s: %w", r.source, err))
		}
		if ce := connError(r.nc, err); ce != nil {
			return driver.Permanent(fmt.Errorf("%s: %w", r.source, ce))
		}
		return driver.Permanent(fmt.Errorf("%s: the NATS connection was closed: %w", r.source, err))
	}
	return err
}

// retry runs op, each attempt bounded by firstRequestTimeout doubling up to
// requestTimeout, until it succeeds, fails with an error that is not
// transient, ctx ends, or clusterRetry has passed since the first attempt;
// then it returns op's last result. An attempt that fails while nc is not
// connected ends the retries at once with an error that says why the
// connection is down (see connError): nats.go is already reconnecting,
// repeating the request would only hide the reason, and the informer
// reports it, backs off and tries again when the connection is back
// (WaitHealed). So does an attempt during which the server sent a
// permissions violation (the request's publish was refused).
func retry[R any](ctx context.Context, nc *nats.Conn, op func(context.Context) (R, error)) (R, error) {
	start := time.Now()
	wait := 25 * time.Millisecond
	timeout := firstRequestTimeout
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		timeout = min(2*timeout, requestTimeout)
		began := time.Now()
		r, err := op(rctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return r, err
		}
		if ce := connError(nc, err); ce != nil {
			return r, ce
		}
		if pe := refusedSince(nc, began); pe != nil {
			// Repeating it would be refused again: the informer reports
			// it and retries after its backoff (permissions may be
			// granted meanwhile).
			return r, fmt.Errorf("%w; the server refused a request on this connection meanwhile: %w", err, pe)
		}
		if !transient(err) || time.Since(start) > clusterRetry {
			return r, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// startOver says whether a List (or replay) whose consumer failed with
// err starts over. A transient cluster condition (no responders while the
// consumer is placed on a node that is catching up, a leader change) is
// retried, with a growing pause, for as long as a single request would be
// (clusterRetry): a lagging replica answered a list's pull requests with
// "no responders" four times within a few seconds in CI, and a List that
// gave up after four quick attempts failed on a healthy cluster. Any other
// lost consumer starts over at most maxListAttempts times. Either way it
// pauses first, longer with each attempt.
func startOver(ctx context.Context, start time.Time, attempt int, err error) bool {
	var fe *feedError
	if ctx.Err() != nil || !errors.As(err, &fe) || errors.Is(err, driver.ErrPermanent) {
		return false
	}
	if attempt >= maxListAttempts && (!transient(err) || time.Since(start) > clusterRetry) {
		return false
	}
	return pauseBeforeRetry(ctx, attempt)
}

// pauseBeforeRetry waits before attempt+1 (100 ms a past attempt, at most
// a second) and reports false if ctx ended first.
func pauseBeforeRetry(ctx context.Context, attempt int) bool {
	t := time.NewTimer(min(time.Duration(attempt)*100*time.Millisecond, time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// info reads the stream's state from its leader.
func (r *streamReader) info(ctx context.Context) (*jetstream.StreamInfo, error) {
	info, err := retry(ctx, r.nc, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		info, err := r.stream.Info(ctx)
		if err != nil {
			r.log.Debug("nats stream info failed", "stream", r.name, "err", err)
			return nil, err
		}
		if info.Cluster != nil && info.Cluster.Leader == "" {
			r.log.Debug("nats stream info answered without a leader", "stream", r.name, "replicas", len(info.Cluster.Replicas))
			return nil, errNoLeader
		}
		return info, nil
	})
	if err != nil {
		return nil, r.fatal(err)
	}
	return info, nil
}

type msgGetRequest struct {
	Seq       uint64 `json:"seq,omitempty"`
	LastFor   string `json:"last_by_subj,omitempty"`
	NextFor   string `json:"next_by_subj,omitempty"`
	NoHeaders bool   `json:"no_hdr,omitempty"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string `json:"subject"`
		Sequence uint64 `json:"seq"`
	} `json:"message,omitempty"`
}

// get asks the stream leader (STREAM.MSG.GET, never a direct get) for the
// sequence of one message; found is false when there is none.
func (r *streamReader) get(ctx context.Context, req msgGetRequest) (seq uint64, found bool, err error) {
	req.NoHeaders = true
	body, err := json.Marshal(req)
	if err != nil {
		return 0, false, err
	}
	subject := r.api + "STREAM.MSG.GET." + r.name
	type result struct {
		seq   uint64
		found bool
	}
	res, err := retry(ctx, r.nc, func(ctx context.Context) (result, error) {
		m, err := r.nc.RequestWithContext(ctx, subject, body)
		if err != nil {
			return result{}, err
		}
		var resp msgGetResponse
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return result{}, fmt.Errorf("decode the answer to %s: %w", subject, err)
		}
		switch {
		case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
			return result{}, nil
		case resp.Error != nil:
			return result{}, resp.Error
		case resp.Message == nil:
			return result{}, fmt.Errorf("the answer to %s holds no message", subject)
		}
		return result{seq: resp.Message.Sequence, found: true}, nil
	})
	if err != nil {
		return 0, false, r.fatal(err)
	}
	return res.seq, res.found, nil
}

// covered reports whether the leader holds no message the filter matches
// after after, when to (a head read earlier) is past it: then whoever has
// delivered everything up to after has delivered everything up to to. A
// message past to does not prove it: one in (after, to] when to was read
// may have been superseded meanwhile (a bucket's History, a stream's
// MaxMsgsPerSubject) by a later one of its key, past to and not
// delivered, and a Bookmark at to would let WaitFor return before the key
// holds it (TestKVReadYourWritesBusyKeys). The caller waits for the
// consumer to deliver it instead.
func (r *streamReader) covered(ctx context.Context, after, to uint64) (bool, error) {
	if after >= to {
		return true, nil
	}
	filters := r.filters
	if len(filters) == 0 {
		filters = []string{r.filter}
	}
	for _, f := range filters {
		_, found, err := r.get(ctx, msgGetRequest{Seq: after + 1, NextFor: f})
		if err != nil {
			return false, fmt.Errorf("%s: look for messages after sequence %d: %w", r.source, after, err)
		}
		if found {
			return false, nil
		}
	}
	return true, nil
}

// identity remembers when the stream was created, so that a stream deleted
// and created again under the same name (sequences starting over) is not
// mistaken for the one whose versions the informer holds.
type identity struct {
	mu      sync.Mutex
	created time.Time
}

// reset adopts the stream a List just read.
func (id *identity) reset(info *jetstream.StreamInfo) {
	id.mu.Lock()
	id.created = info.Created
	id.mu.Unlock()
}

// known reports whether the stream's creation time has been seen before
// (by a List or an earlier check): only then does a check that passes
// prove that info is of the same stream.
func (id *identity) known() bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return !id.created.IsZero()
}

func (id *identity) check(source string, info *jetstream.StreamInfo) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.created.IsZero() {
		id.created = info.Created
		return nil
	}
	if !info.Created.Equal(id.created) {
		return fmt.Errorf("%s: the stream was deleted and created again (created %s, the versions held are from the one created %s): %w",
			source, info.Created.UTC().Format(time.RFC3339Nano), id.created.UTC().Format(time.RFC3339Nano), driver.ErrExpired)
	}
	return nil
}
