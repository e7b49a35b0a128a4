package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig returns a configuration for a relay stream named name whose
// subjects are prefix.>: limits retention, one message kept per subject
// (the stream is a compacted log: the last change of every key, so a
// downstream lists from it in one pass and it never grows past the number
// of keys, tombstones included), no age or size limit (they could remove a
// key's only message), and a two-minute duplicate window for Nats-Msg-Id.
// Set Replicas (3 on a cluster) and Storage as needed before creating it.
func StreamConfig(name, prefix string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              name,
		Subjects:          []string{prefix + ".>"},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		Discard:           jetstream.DiscardOld,
		Duplicates:        2 * time.Minute,
		Storage:           jetstream.FileStorage,
	}
}

// checkStream reads the stream and refuses one the relay cannot use,
// saying how to fix it.
func checkStream(ctx context.Context, js jetstream.JetStream, name, prefix string) (jetstream.Stream, error) {
	source := fmt.Sprintf("relay stream %q", name)
	if name == "" || strings.ContainsAny(name, ".*> \t") {
		return nil, fmt.Errorf("%s: invalid stream name", source)
	}
	if prefix == "" || strings.ContainsAny(prefix, "*> \t") || strings.HasPrefix(prefix, ".") || strings.HasSuffix(prefix, ".") || strings.Contains(prefix, "..") {
		return nil, fmt.Errorf("%s: subject prefix %q must be one or more literal tokens (\"relay.users\")", source, prefix)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%s does not exist: create it with relay.StreamConfig(%q, %q) (Replicas: 3 on a cluster), or `nats stream add %s --subjects '%s.>' --retention limits --max-msgs-per-subject 1 --dupe-window 2m`: %w", source, name, prefix, name, prefix, err)
		}
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	cfg := st.CachedInfo().Config
	var bad []string
	if cfg.Retention != jetstream.LimitsPolicy {
		bad = append(bad, fmt.Sprintf("retention is %v, not limits (work-queue and interest retention remove messages downstream informers still need)", cfg.Retention))
	}
	if len(cfg.Subjects) != 1 || cfg.Subjects[0] != prefix+".>" {
		bad = append(bad, fmt.Sprintf("subjects are %q, not exactly [%q] (the relay fences its publishes on the stream's last sequence, so nothing else may write to it)", cfg.Subjects, prefix+".>"))
	}
	if cfg.MaxAge > 0 || cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 {
		bad = append(bad, fmt.Sprintf("it has an age or size limit (MaxAge %v, MaxMsgs %d, MaxBytes %d) that can remove the only message of a key", cfg.MaxAge, cfg.MaxMsgs, cfg.MaxBytes))
	}
	if cfg.Duplicates <= 0 {
		bad = append(bad, "its duplicate window is zero")
	}
	if cfg.Sealed {
		bad = append(bad, "it is sealed")
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s cannot hold a relay: %s; fix: recreate or update it with relay.StreamConfig(%q, %q)", source, strings.Join(bad, "; "), name, prefix)
	}
	return st, nil
}
