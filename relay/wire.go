package relay

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/internal/keyshard"
)

// Headers of a relayed message. Every message carries hdrMeta, one header
// whose space-separated fields are the source's version of the change, the
// version of the last group of changes the relay completed before it
// (progress does not count) and the relay leader's term (epoch). Key
// messages go on with their operation, their position in the group and the
// group's size, so that a reader tells a complete group from one whose
// messages were removed (a later change of the same key supersedes a
// message in a stream that keeps one per subject), and end with the flags
// "commit" (the group's last message) and "relist" (a relist's group):
//
//	Dbi: <version> <prev> <epoch>                                 progress, abort
//	Dbi: <version> <prev> <epoch> <op> <index> <count>[ commit][ relist]  key
//
// One header rather than one per field: every downstream consumer parses
// every message's headers (nats.go builds a map entry and strings for
// each), which made them the largest cost of a downstream watch.
//
// A term's first message, when the term starts by mending what a late
// write of an earlier term cost, is progress with a second header that
// records it until the repair or relist is stored (see pending):
//
//	Dbi-Pending: repair <from>                                  a repair replaying the source from version <from>
//	Dbi-Pending: relist
//
// A header of its own, not a field of Dbi, so that a reader that does not
// know it (a downstream, or a relay of an earlier release) reads the
// message as the progress it also is.
const (
	hdrMeta    = "Dbi"
	hdrError   = "Dbi-Error"   // on an "err" key message: why the source could not decode the object
	hdrPending = "Dbi-Pending" // on a term's first progress message: the repair or relist it starts with

	pendRepair = "repair"
	pendRelist = "relist"

	flagCommit = "commit"
	flagRelist = "relist"
)

// Operations of key messages (hdrMeta's fourth field).
const (
	opPut = "put"
	opDel = "del"
	opErr = "err" // the source could not decode the object; hdrError says why
)

// Subject tokens below the prefix.
const (
	tokKey      = "k"        // <prefix>.k.<encoded key>: a change
	tokShard    = "s"        // <prefix>.s.<shards>.<shard>.<encoded key>: a change, with Options.Shards
	tokProgress = "progress" // <prefix>.progress: the source's head
	tokAbort    = "abort"    // <prefix>.abort.<version>: drop an unfinished group
	// <prefix>.term: a term's first message, progress (the same header)
	// on a subject of its own, so that a deposed term's late progress,
	// which the stream would keep instead (one message per subject),
	// cannot remove it: it is the later term's mark that shows the late
	// writes behind it (lateWrites), and carries the record of what the
	// term mends (hdrPending). A first message is sent alone, never
	// pipelined, so no term's is ever late.
	tokTerm = "term"
)

// encodeKey turns a key into one subject token: "k" and the key in
// unpadded base64url, so that any key (dots, spaces, wildcards, bytes that
// are not UTF-8, the empty key) is a valid token.
func encodeKey(key string) string {
	return "k" + base64.RawURLEncoding.EncodeToString([]byte(key))
}

func decodeKey(tok string) (string, error) {
	if !strings.HasPrefix(tok, "k") {
		return "", fmt.Errorf("subject token %q is not an encoded key", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(tok[1:])
	if err != nil {
		return "", fmt.Errorf("subject token %q is not an encoded key: %w", tok, err)
	}
	return string(b), nil
}

// kind of a relayed message.
type kind uint8

const (
	kindKey kind = iota + 1
	kindProgress
	kindAbort
)

// entry is one relayed message as the stream holds it.
type entry struct {
	kind    kind
	key     string // for kindKey
	shards  int    // for kindKey: the relay's Options.Shards (0: published without)
	shard   int    // for kindKey with shards: the key's shard
	op      string // for kindKey
	seq     uint64
	version uint64
	prev    uint64
	epoch   uint64
	commit  bool
	relist  bool
	index   uint64
	count   uint64
	errText string
	data    []byte
	pending *pending // for kindProgress: hdrPending, if any
}

// pending is what a term recorded in its first message that it mends
// before anything else (hdrPending): the message supersedes the later
// term's progress message that showed the late write (see lateLoss), so
// that, should the term end before its repair or relist is stored, the
// record is the only trace of the change the stream lacks.
type pending struct {
	relist bool   // a relist
	from   uint64 // else a repair that replays the source from this version (see repair)
}

// commitPoint reports whether every change up to e.version has been
// relayed completely once e is in the stream.
func (e entry) commitPoint() bool {
	return e.kind == kindProgress || (e.kind == kindKey && e.index+1 == e.count)
}

// lastChange is the version of the last complete group of changes in a
// stream that ends at e.
func (e entry) lastChange() uint64 {
	if e.kind == kindKey && e.commitPoint() {
		return e.version
	}
	return e.prev
}

// committed is the version a stream ending at e is complete up to.
func (e entry) committed() uint64 {
	if e.commitPoint() {
		return e.version
	}
	return e.prev
}

// parse reads a relayed message; prefix is the subject prefix.
func parse(prefix, subject string, seq uint64, h nats.Header, data []byte) (entry, error) {
	e := entry{seq: seq}
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return e, fmt.Errorf("subject %q is not below the relay prefix %q", subject, prefix)
	}
	switch {
	case rest == tokProgress || rest == tokTerm:
		e.kind = kindProgress
	case strings.HasPrefix(rest, tokAbort+"."):
		e.kind = kindAbort
	case strings.HasPrefix(rest, tokKey+"."):
		e.kind = kindKey
		var err error
		if e.key, err = decodeKey(strings.TrimPrefix(rest, tokKey+".")); err != nil {
			return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
		}
	case strings.HasPrefix(rest, tokShard+"."):
		e.kind = kindKey
		toks := strings.Split(rest, ".")
		if len(toks) != 4 {
			return e, fmt.Errorf("subject %q sequence %d: not a relay subject", subject, seq)
		}
		n, err1 := strconv.Atoi(toks[1])
		sh, err2 := strconv.Atoi(toks[2])
		if err1 != nil || err2 != nil || n <= 0 || sh < 0 || sh >= n {
			return e, fmt.Errorf("subject %q sequence %d: tokens %q.%q are not a shard count and a shard below it", subject, seq, toks[1], toks[2])
		}
		e.shards, e.shard = n, sh
		var err error
		if e.key, err = decodeKey(toks[3]); err != nil {
			return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
		}
	default:
		return e, fmt.Errorf("subject %q sequence %d: not a relay subject", subject, seq)
	}
	meta := h.Get(hdrMeta)
	if meta == "" {
		return e, fmt.Errorf("subject %q sequence %d: header %s is missing (was it written by something other than a relay?)", subject, seq, hdrMeta)
	}
	if err := e.parseMeta(meta); err != nil {
		return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
	}
	if p := h.Get(hdrPending); p != "" && e.kind == kindProgress {
		var err error
		if e.pending, err = parsePending(p); err != nil {
			return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
		}
	}
	if e.kind != kindKey {
		return e, nil
	}
	switch e.op {
	case opPut:
		e.data = append([]byte(nil), data...)
	case opDel:
	case opErr:
		e.errText = h.Get(hdrError)
	default:
		return e, fmt.Errorf("subject %q sequence %d: unknown operation %q", subject, seq, e.op)
	}
	if e.index >= e.count {
		return e, fmt.Errorf("subject %q sequence %d: index %d is not below count %d", subject, seq, e.index, e.count)
	}
	return e, nil
}

// parseMeta reads hdrMeta's fields into e, whose kind is set.
func (e *entry) parseMeta(meta string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("header %s=%q: %s (was it written by something other than a relay?)", hdrMeta, meta, fmt.Sprintf(format, args...))
	}
	rest := meta
	field := func() string {
		f, r, _ := strings.Cut(rest, " ")
		rest = r
		return f
	}
	number := func(name string) (uint64, error) {
		f := field()
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, bad("%s %q is not a number", name, f)
		}
		return n, nil
	}
	var err error
	if e.version, err = number("version"); err != nil {
		return err
	}
	if e.prev, err = number("prev"); err != nil {
		return err
	}
	if e.epoch, err = number("epoch"); err != nil {
		return err
	}
	if e.kind != kindKey {
		if rest != "" {
			return bad("unexpected fields %q after the epoch", rest)
		}
		return nil
	}
	if e.op = field(); e.op == "" {
		return bad("the operation is missing")
	}
	if e.index, err = number("index"); err != nil {
		return err
	}
	if e.count, err = number("count"); err != nil {
		return err
	}
	for rest != "" {
		switch f := field(); f {
		case flagCommit:
			e.commit = true
		case flagRelist:
			e.relist = true
		default:
			return bad("unknown flag %q", f)
		}
	}
	return nil
}

// parsePending reads hdrPending.
func parsePending(p string) (*pending, error) {
	if p == pendRelist {
		return &pending{relist: true}, nil
	}
	if f, ok := strings.CutPrefix(p, pendRepair+" "); ok {
		if from, err := strconv.ParseUint(f, 10, 64); err == nil && from > 0 {
			return &pending{from: from}, nil
		}
	}
	return nil, fmt.Errorf("header %s=%q is neither %q nor %q and a version (was it written by something other than a relay?)", hdrPending, p, pendRelist, pendRepair)
}

// setPending records pd in m, a term's first progress message (hdrPending).
func setPending(m *nats.Msg, pd pending) {
	v := pendRelist
	if !pd.relist {
		v = pendRepair + " " + strconv.FormatUint(pd.from, 10)
	}
	m.Header[hdrPending] = []string{v}
}

// message builds one relayed message whose hdrMeta holds version, prev
// and epoch, then the key fields, if any (appendKeyMeta).
func message(subject string, version, prev, epoch uint64, key []byte) *nats.Msg {
	b := make([]byte, 0, 64)
	b = strconv.AppendUint(b, version, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, prev, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, epoch, 10)
	b = append(b, key...)
	return &nats.Msg{Subject: subject, Header: nats.Header{hdrMeta: []string{string(b)}}}
}

// keyMeta returns the key fields of hdrMeta (with their leading space)
// appended to b.
func keyMeta(b []byte, op string, index, count int, commit, relist bool) []byte {
	b = append(b, ' ')
	b = append(b, op...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(count), 10)
	if commit {
		b = append(b, " "+flagCommit...)
	}
	if relist {
		b = append(b, " "+flagRelist...)
	}
	return b
}

// isFenced reports a publish refused because the stream did not end at
// the sequence the relay expected: another relay published meanwhile, or
// an earlier message of the relay's window was not stored.
func isFenced(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return true
		}
	}
	return false
}

// KeySubject returns the subject under which a relay with the given prefix
// publishes the changes of key: prefix.k.<key in unpadded base64url,
// after a "k">. The last message on it is the key's last change.
func KeySubject(prefix, key string) string {
	return prefix + "." + tokKey + "." + encodeKey(key)
}

// keySubject is the subject of key's changes for a relay publishing with
// the given count of shards (0: none, KeySubject's).
func keySubject(prefix string, shards int, key string) string {
	if shards <= 0 {
		return KeySubject(prefix, key)
	}
	return ShardKeySubject(prefix, shards, key)
}

// ShardKeySubject returns the subject under which a relay with the given
// prefix and Options.Shards publishes the changes of key:
// prefix.s.<shards>.<shard>.<key as in KeySubject>, where shard is
// shard.Of(key, shards) (the same hash as the sharder's assignment). The
// count is in the subject, so that a downstream never reads a stream
// published with another count as if it were its own.
func ShardKeySubject(prefix string, shards int, key string) string {
	return shardPrefix(prefix, shards, keyshard.Of(key, shards)) + encodeKey(key)
}

// shardPrefix is the subject prefix of shard's keys, up to the key's
// token: prefix.s.<shards>.<shard>.
func shardPrefix(prefix string, shards, shard int) string {
	return prefix + "." + tokShard + "." + strconv.Itoa(shards) + "." + strconv.Itoa(shard) + "."
}

// ShardSubjects returns the subject filters of the given shards' changes
// (prefix.s.<shards>.<shard>.*), what a Downstream owning them consumes.
func ShardSubjects(prefix string, shards int, owned []int) []string {
	out := make([]string, 0, len(owned))
	for _, s := range owned {
		out = append(out, shardPrefix(prefix, shards, s)+"*")
	}
	return out
}

// layout names how a relay lays keys out in subjects, for errors.
func layout(shards int) string {
	if shards <= 0 {
		return "without Options.Shards (subjects <prefix>.k.<key>)"
	}
	return fmt.Sprintf("with Options.Shards %d (subjects <prefix>.s.%d.<shard>.<key>)", shards, shards)
}
