package statuspage_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
	"github.com/dbinformer/dbinformer/statuspage"
)

// Two running relays of one table (a Postgres table into JetStream,
// elected through a Postgres advisory lock) show on the page and in its
// JSON: the leader with its term, what it published and had stored, the
// stream's last version, the source's head and the lag; the follower with
// the leader's term as the stream shows it. A name and an error holding a
// password are redacted.
func TestRelayOnThePage(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	h := relaytest.New(t, pgtest.New(t, pg, pgtest.Options{}), nsrv.JetStream(t), relaytest.Options{
		Relays: 2,
		NewElector: func(int) leader.Elector {
			el, err := leader.NewPostgres(pg.ConnString(), "page-relay", leader.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return el
		},
	})
	ctx := context.Background()
	rv, err := h.Put(ctx, "a", 1) // returns once the relay published it
	if err != nil {
		t.Fatal(err)
	}
	lead := h.Leader()
	if lead < 0 {
		t.Fatal("no relay leads after a write was relayed")
	}
	page := statuspage.New(statuspage.Options{})
	page.AddRelay(secretRelay{h.Relay(lead)})
	page.AddRelay(namedRelay{h.Relay(1 - lead), "follower"})

	var rs, fs statuspage.RelayStatus
	informertest.Eventually(t, "the relay's stored version reaches the write's", func() bool {
		st := page.Snapshot(ctx)
		if len(st.Relays) != 2 {
			t.Fatalf("Snapshot has %d relays, want 2", len(st.Relays))
		}
		rs, fs = st.Relays[0], st.Relays[1]
		return rs.Stored >= rv
	})
	if fs.Name != "follower" || fs.Role != "follower" || fs.Leading || fs.Epoch != 0 || fs.Terms != 0 || fs.StreamEpoch != rs.Epoch || fs.StreamVersion < rv {
		t.Errorf("follower status %+v: want a follower that never led, seeing the leader's term %d and version %d in the stream", fs, rs.Epoch, rv)
	}
	if rs.Role != "leader" || !rs.Leading || rs.Epoch == 0 || rs.Terms != 1 || rs.LeadingSince.IsZero() {
		t.Errorf("relay status %+v: want the leader of its first term", rs)
	}
	if rs.StreamVersion < rv || rs.StreamEpoch != rs.Epoch || rs.StreamSequence == 0 || rs.StreamError != "" {
		t.Errorf("relay stream: version %d (want ≥ %d), epoch %d (want the term's %d), sequence %d, error %q",
			rs.StreamVersion, rv, rs.StreamEpoch, rs.Epoch, rs.StreamSequence, rs.StreamError)
	}
	if !rs.HasHead || rs.Head < rv || rs.LagVersions == nil {
		t.Errorf("relay source head %d (has %v, error %q), lag %v: want a head at least %d and a lag", rs.Head, rs.HasHead, rs.HeadError, rs.LagVersions, rv)
	}
	if rs.Published < 2 || rs.Relists != 1 {
		t.Errorf("relay published %d messages and %d relists: want the term's first message and a write, after the first term's relist", rs.Published, rs.Relists)
	}

	srv := httptest.NewServer(page)
	defer srv.Close()
	for _, path := range []string{"/", "/?format=json"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s := string(body)
		if strings.Contains(s, "hunter2") {
			t.Errorf("%s shows the password", path)
		}
		if path == "/" && (!strings.Contains(s, `data-relay="users password=REDACTED"`) || !strings.Contains(s, `data-role="leader"`)) {
			t.Errorf("the page has no leader row for the relay:\n%s", s)
		}
		if path == "/" && (!strings.Contains(s, `<th>Repairs</th>`) || !strings.Contains(s, `<td class="num repairs">0</td>`)) {
			t.Errorf("the page shows no repairs column for the relays:\n%s", s)
		}
		if path != "/" {
			var st statuspage.Status
			if err := json.Unmarshal(body, &st); err != nil || len(st.Relays) != 2 || st.Relays[0].Role != "leader" || st.Relays[1].Role != "follower" {
				t.Errorf("JSON relays %+v (%v), want the leader and the follower", st.Relays, err)
			}
		}
	}
}

// namedRelay renames a relay (two relays of one stream in one process
// have one name, the stream's).
type namedRelay struct {
	statuspage.Relay
	name string
}

func (r namedRelay) Name() string { return r.name }

// secretRelay names a relay, and says its last error, with a password in
// them, as a careless program might.
type secretRelay struct{ statuspage.Relay }

func (secretRelay) Name() string { return "users password=hunter2" }

func (r secretRelay) RelayStatus(ctx context.Context) core.RelayStatus {
	st := r.Relay.RelayStatus(ctx)
	st.LastError = "connect postgres://app:hunter2@db/app: refused"
	return st
}
