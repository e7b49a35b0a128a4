package natsinformer_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// runUnsynced runs an informer over lw without waiting for its sync, until
// the test ends, retrying quickly; it returns the informer and the errors
// it reports.
func runUnsynced[T any](t *testing.T, lw driver.ListerWatcher[T]) (*core.SharedIndexInformer[T], *informertest.Errors) {
	t.Helper()
	return informertest.Start(t, lw, core.InformerOptions[T]{
		MinWatchTimeout: time.Hour,
		Backoff:         core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
}

// A server that is down while the informer makes its first sync: the List
// does not wait silently for nats.go's reconnects; the reason a reconnect
// fails (connection refused, recorded by ReconnectErrors) is named by the
// sync status, the error handler and WaitForCacheSyncTimeout, and the
// informer syncs once the server is back. Without ReconnectErrors it says
// that the connection is reconnecting.
func TestKVServerDownNamesCause(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []nats.Option
		cause string
	}{
		{"ReconnectErrors", []nats.Option{natsinformer.ReconnectErrors()}, "connection refused"},
		{"Plain", nil, "the NATS connection is reconnecting"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := harness.StartNATS(t)
			js := srv.JetStream(t)
			kv := newBucket(t, js, jetstream.KeyValueConfig{})
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			if _, err := put(ctx, kv, "k1", 1); err != nil {
				t.Fatal(err)
			}
			opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectJitter(0, 0)}, c.opts...)
			nc, err := nats.Connect(srv.URL(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			ijs, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			lw := newKVLW(t, ijs, kv.Bucket(), natsinformer.KVOptions[item]{})
			srv.Stop()
			inf, errs := runUnsynced(t, lw)
			informertest.SaysWhy(t, inf, errs, c.cause, "")
			if inf.HasSynced() {
				t.Fatal("synced while the server was down")
			}
			srv.Restart(t)
			converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })

			// The watch too: with the server stopped again, the watch
			// ends (at the latest at its next idle check) naming the cause.
			srv.Stop()
			informertest.Eventually(t, "the sync status to name the watch's "+c.cause, func() bool {
				st := inf.SyncStatus()
				return st.WatchFailures.Count > 0 && strings.Contains(st.String(), c.cause)
			})
			t.Logf("sync status: %s", inf.SyncStatus())
			srv.Restart(t)
			waitFor(t, inf, putAfterRestart(t, ctx, kv, "k2", 2))
		})
	}
}

// authServer is a JetStream server whose users have passwords.
type authServer struct {
	opts natsserver.Options
	srv  *natsserver.Server
	deny map[string][]string // user -> subjects it may not publish to
}

func startAuthServer(t *testing.T, users map[string]string) *authServer {
	t.Helper()
	a := &authServer{opts: natsserver.Options{
		ServerName: "dbinformer-auth",
		Host:       "127.0.0.1",
		Port:       harness.FreePort(t),
		JetStream:  true,
		StoreDir:   filepath.Join(t.TempDir(), "jetstream"),
		NoSigs:     true,
		NoLog:      true,
	}}
	a.setUsers(users)
	opts := a.opts
	srv, err := natsserver.NewServer(&opts)
	if err != nil {
		harness.Unavailable(t, "embedded nats-server with users: %v", err)
		return nil
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		harness.Unavailable(t, "embedded nats-server with users on 127.0.0.1:%d not ready", a.opts.Port)
		return nil
	}
	a.srv = srv
	t.Cleanup(func() { a.srv.Shutdown(); a.srv.WaitForShutdown() })
	return a
}

// restart stops the server and starts it again, on the same port and
// store, with these users: every client reconnects and meets the new
// passwords. (ReloadOptions would do it without a restart, but
// nats-server's auth-error event races with connections being accepted,
// which the race detector reports while a client reconnects every 50ms.)
func (a *authServer) restart(t *testing.T, users map[string]string) {
	t.Helper()
	a.srv.Shutdown()
	a.srv.WaitForShutdown()
	a.setUsers(users)
	opts := a.opts
	srv, err := natsserver.NewServer(&opts)
	if err != nil {
		t.Fatalf("restart nats-server with new users: %v", err)
	}
	srv.Start()
	a.srv = srv
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatalf("nats-server on 127.0.0.1:%d not ready after its restart", a.opts.Port)
	}
}

func (a *authServer) setUsers(users map[string]string) {
	a.opts.Users = nil
	for u, p := range users {
		user := &natsserver.User{Username: u, Password: p}
		if d := a.deny[u]; len(d) > 0 {
			user.Permissions = &natsserver.Permissions{Publish: &natsserver.SubjectPermission{Allow: []string{">"}, Deny: d}}
		}
		a.opts.Users = append(a.opts.Users, user)
	}
}

// reload changes the users' passwords; the server disconnects the clients
// whose credentials no longer hold.
func (a *authServer) reload(t *testing.T, users map[string]string) {
	t.Helper()
	a.setUsers(users)
	opts := a.opts
	if err := a.srv.ReloadOptions(&opts); err != nil {
		t.Fatalf("reload nats-server users: %v", err)
	}
}

func (a *authServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", a.opts.Port) }

// The informer's user loses its password (the server restarts with new
// users) during its first sync: the authorization violation the server answers
// each reconnect with is named by the sync status, the error handler and
// WaitForCacheSyncTimeout, never the password. With nats.go's default, the
// connection closes after the second violation and the informer stops
// with a permanent error naming it; with IgnoreAuthErrorAbort it keeps
// reconnecting, and syncs once the password is valid again.
func TestKVAuthorizationViolationNamesCause(t *testing.T) {
	const oldPW, newPW = "old-s3cret-pw", "new-s3cret-pw"
	users := map[string]string{"admin": "admin-pw", "app": oldPW}
	a := startAuthServer(t, users)
	admin, err := nats.Connect(a.url(), nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := put(ctx, kv, "k1", 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		abort bool
	}{{"Closed", true}, {"Reconnecting", false}} {
		t.Run(c.name, func(t *testing.T) {
			a.restart(t, map[string]string{"admin": "admin-pw", "app": oldPW})
			opts := []nats.Option{nats.UserInfo("app", oldPW), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectJitter(0, 0)}
			if !c.abort {
				opts = append(opts, nats.IgnoreAuthErrorAbort())
			}
			nc, err := nats.Connect(a.url(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			ijs, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			lw := newKVLW(t, ijs, kv.Bucket(), natsinformer.KVOptions[item]{})
			a.restart(t, map[string]string{"admin": "admin-pw", "app": newPW})
			informertest.Eventually(t, "the server to refuse the old password", func() bool {
				return nc.Status() != nats.CONNECTED
			})
			inf, errs := runUnsynced(t, lw)
			informertest.SaysWhy(t, inf, errs, "authorization violation", "s3cret")
			if c.abort {
				err := errs.Wait(t, "the informer to stop", func(err error) bool { return errors.Is(err, driver.ErrPermanent) })
				if !strings.Contains(err.Error(), "closed") || !errors.Is(err, nats.ErrAuthorization) {
					t.Errorf("permanent error %q: want it to say the connection closed on nats.ErrAuthorization", err)
				}
				return
			}
			if errs.Find(func(err error) bool { return errors.Is(err, nats.ErrAuthorization) }) == nil {
				t.Errorf("no reported error matches nats.ErrAuthorization: %v", errs.All())
			}
			a.restart(t, map[string]string{"admin": "admin-pw", "app": oldPW})
			converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
		})
	}
}

// The informer's user loses the right to read stream info (its
// permissions are reloaded) during its first sync: the server refuses the
// request's publish with an asynchronous permissions violation and never
// answers it; the List does not time out silently for 30s but names the
// violation (and the subject) at once in the sync status, the error
// handler and WaitForCacheSyncTimeout. Once the right is back, it syncs.
func TestKVPermissionsViolationNamesCause(t *testing.T) {
	users := map[string]string{"admin": "admin-pw", "app": "app-pw"}
	a := startAuthServer(t, users)
	admin, err := nats.Connect(a.url(), nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := put(ctx, kv, "k1", 1); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(a.url(), nats.UserInfo("app", "app-pw"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ijs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lw := newKVLW(t, ijs, kv.Bucket(), natsinformer.KVOptions[item]{})
	a.deny = map[string][]string{"app": {"$JS.API.STREAM.INFO.>"}}
	a.reload(t, users)
	inf, errs := runUnsynced(t, lw)
	informertest.SaysWhy(t, inf, errs, "Permissions Violation for Publish to \"$JS.API.STREAM.INFO.KV_"+kv.Bucket(), "")
	if errs.Find(func(err error) bool { return errors.Is(err, nats.ErrPermissionViolation) }) == nil {
		t.Errorf("no reported error matches nats.ErrPermissionViolation: %v", errs.All())
	}
	a.deny = nil
	a.reload(t, users)
	converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
}

// An event stream's List (its replay) whose server is down names the
// cause too: the reader is the same as a bucket's.
func TestEventStreamServerDownNamesCause(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	st, root := newStream(t, js, jetstream.StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := js.Publish(ctx, root+".acct.a1", []byte(`{"type":"open"}`)); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), natsinformer.ReconnectErrors())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ijs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lw, err := natsinformer.NewEventStream(ctx, ijs, st.CachedInfo().Config.Name, natsinformer.EventStreamOptions[Account]{
		Filter: root + ".acct.*",
		Reduce: reduceAccount,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	inf, errs := runUnsynced[Account](t, lw)
	informertest.SaysWhy(t, inf, errs, "connection refused", "")
	srv.Restart(t)
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatalf("after the server is back: %v", err)
	}
	if a, ok := inf.Indexer().Get("a1"); !ok || a.Events != 1 {
		t.Errorf("cache holds %v %v for a1", a, ok)
	}
}
