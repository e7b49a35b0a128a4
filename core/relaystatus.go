package core

import "time"

// RelayStatus is where a relay (package relay) stands, as a status page
// and Prometheus (metrics/prometheus) show it beside the informers: its
// part in the election, what it has published and had stored, and the
// relay stream and the source as read when asked. It lives here, beside
// SyncStatus, so that those packages read it without importing the relay
// (and its NATS client). It holds no object and no connection string;
// LastError, StreamError and HeadError are messages for a page to redact.
type RelayStatus struct {
	// Leading: this relay reads the source and publishes now.
	Leading bool `json:"leading"`
	// Identity is this candidate's identity in the election; Epoch its
	// current term's (while Leading) or its last term's, 0 if it never
	// led; LeadingSince when the current term began; Terms how many it led.
	Identity     string    `json:"identity,omitempty"`
	Epoch        uint64    `json:"epoch"`
	LeadingSince time.Time `json:"leadingSince,omitzero"`
	Terms        uint64    `json:"terms"`
	// Published counts the messages this relay published and JetStream
	// acknowledged; Stored is the source version up to which JetStream
	// has stored everything it published, which is what the source was
	// told it may discard (a Postgres slot's confirmed position).
	Published uint64          `json:"published"`
	Stored    ResourceVersion `json:"stored"`
	// Relists counts the relists of the source it published; Repairs the
	// times it mended the stream from the source instead (a deposed
	// leader's late write, or a message of its own refused while a later
	// one was stored: the changes those cost, replayed from the source,
	// with no relist); TermRestarts the terms that failed and started
	// again from the stream, the last one's reason in LastError at
	// LastErrorAt.
	Relists      uint64    `json:"relists"`
	Repairs      uint64    `json:"repairs"`
	TermRestarts uint64    `json:"termRestarts"`
	LastError    string    `json:"lastError,omitempty"`
	LastErrorAt  time.Time `json:"lastErrorAt,omitzero"`

	// Read from the stream when asked: the epoch of the term that wrote
	// its last message (the leader's, seen from a follower too), its last
	// sequence and the last source version it holds completely.
	StreamEpoch    uint64          `json:"streamEpoch"`
	StreamSequence uint64          `json:"streamSequence"`
	StreamVersion  ResourceVersion `json:"streamVersion"`
	StreamError    string          `json:"streamError,omitempty"`
	// Head is the source's newest version, read through the relay's
	// source (driver.HeadReader) when asked; HasHead is false when it could
	// not be read (HeadError says why) or the source cannot tell it.
	Head      ResourceVersion `json:"head"`
	HasHead   bool            `json:"hasHead"`
	HeadError string          `json:"headError,omitempty"`
}

// Lag is how far the stream trails the source, in the source's version
// units (Head − StreamVersion, 0 when the stream is ahead of a head read
// earlier); false when either is unknown.
func (s RelayStatus) Lag() (ResourceVersion, bool) {
	if !s.HasHead || s.StreamError != "" {
		return 0, false
	}
	if s.Head <= s.StreamVersion {
		return 0, true
	}
	return s.Head - s.StreamVersion, true
}
