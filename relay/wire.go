package relay

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a relayed message. Every message carries hdrVersion (the
// source's version of the change), hdrPrev (the version of the last group
// of changes the relay completed before it; progress does not count) and
// hdrEpoch (the relay leader's term). Key messages also carry their
// position in the group and the group's size, so that a reader tells a
// complete group from one whose messages were removed (a later change of
// the same key supersedes a message in a stream that keeps one per
// subject).
const (
	hdrVersion = "Dbi-Version"
	hdrPrev    = "Dbi-Prev"
	hdrEpoch   = "Dbi-Epoch"
	hdrOp      = "Dbi-Op"
	hdrCommit  = "Dbi-Commit"
	hdrRelist  = "Dbi-Relist" // "1" on the messages of a relist's group
	hdrIndex   = "Dbi-Index"  // position of a key message in its group, from 0
	hdrCount   = "Dbi-Count"  // number of key messages in its group
	hdrError   = "Dbi-Error"
)

// Operations (hdrOp) of key messages.
const (
	opPut = "put"
	opDel = "del"
	opErr = "err" // the source could not decode the object; hdrError says why
)

// Subject tokens below the prefix.
const (
	tokKey      = "k"        // <prefix>.k.<encoded key>: a change
	tokProgress = "progress" // <prefix>.progress: the source's head
	tokAbort    = "abort"    // <prefix>.abort.<version>: drop an unfinished group
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

func headerUint(h nats.Header, name string) (uint64, error) {
	v := h.Get(name)
	if v == "" {
		return 0, fmt.Errorf("header %s is missing", name)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("header %s=%q is not a number", name, v)
	}
	return n, nil
}

// parse reads a relayed message; prefix is the subject prefix.
func parse(prefix, subject string, seq uint64, h nats.Header, data []byte) (entry, error) {
	e := entry{seq: seq}
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return e, fmt.Errorf("subject %q is not below the relay prefix %q", subject, prefix)
	}
	var err error
	if e.version, err = headerUint(h, hdrVersion); err != nil {
		return e, fmt.Errorf("subject %q sequence %d: %w (was it written by something other than a relay?)", subject, seq, err)
	}
	if e.prev, err = headerUint(h, hdrPrev); err != nil {
		return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
	}
	if e.epoch, err = headerUint(h, hdrEpoch); err != nil {
		return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
	}
	switch {
	case rest == tokProgress:
		e.kind = kindProgress
	case strings.HasPrefix(rest, tokAbort+"."):
		e.kind = kindAbort
	case strings.HasPrefix(rest, tokKey+"."):
		e.kind = kindKey
		if e.key, err = decodeKey(strings.TrimPrefix(rest, tokKey+".")); err != nil {
			return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
		}
		e.op = h.Get(hdrOp)
		switch e.op {
		case opPut:
			e.data = append([]byte(nil), data...)
		case opDel:
		case opErr:
			e.errText = h.Get(hdrError)
		default:
			return e, fmt.Errorf("subject %q sequence %d: unknown %s %q", subject, seq, hdrOp, e.op)
		}
		e.commit = h.Get(hdrCommit) == "1"
		e.relist = h.Get(hdrRelist) == "1"
		if e.index, err = headerUint(h, hdrIndex); err != nil {
			return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
		}
		if e.count, err = headerUint(h, hdrCount); err != nil {
			return e, fmt.Errorf("subject %q sequence %d: %w", subject, seq, err)
		}
		if e.index >= e.count {
			return e, fmt.Errorf("subject %q sequence %d: %s %d is not below %s %d", subject, seq, hdrIndex, e.index, hdrCount, e.count)
		}
	default:
		return e, fmt.Errorf("subject %q sequence %d: not a relay subject", subject, seq)
	}
	return e, nil
}

// message builds one relayed message. msgID is the Nats-Msg-Id.
func message(subject string, version, prev, epoch uint64) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(hdrVersion, strconv.FormatUint(version, 10))
	m.Header.Set(hdrPrev, strconv.FormatUint(prev, 10))
	m.Header.Set(hdrEpoch, strconv.FormatUint(epoch, 10))
	return m
}

// jsErrCodeWrongLastMsgID is JetStream's "wrong last msg ID" (the server's
// JSStreamWrongLastMsgIDErrF); nats.go has no constant for it.
const jsErrCodeWrongLastMsgID jetstream.ErrorCode = 10070

// isFenced reports a publish refused because the stream did not end where
// the relay expected (its last sequence or its last message's id): another
// relay published meanwhile, or an earlier message of the relay's window
// was not stored.
func isFenced(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant, jsErrCodeWrongLastMsgID:
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
