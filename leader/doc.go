// Package leader runs a function while this process is the leader of an
// election held on an engine the user already runs: etcd (NewEtcd, over
// concurrency.Election), Postgres (NewPostgres, a session advisory lock on
// a dedicated connection) or Kubernetes (NewKube, a coordination.k8s.io
// Lease through client-go's leaderelection). It is what the relay package
// uses to have exactly one reader of a source, and it is usable on its own
// (an active/passive controller).
//
// # Contract
//
// Elector.Run campaigns and calls the lead function with a Term and a
// context that is cancelled, with cause ErrLost, when the leadership is
// lost: the etcd session's lease expired or was revoked, the Postgres lock
// connection died (checked every PostgresOptions.Check) or went a lease
// without a check, the Lease could not be renewed within
// KubeOptions.RenewDeadline.
//
// # Leases
//
// Every backend deposes a leader that stops showing itself — frozen
// (SIGSTOP, a paused VM), cut off by the network, or with a connection the
// server still believes open — within a lease the user sets, DefaultLease
// (5s) unless set: EtcdOptions.TTL (the session lease), KubeOptions.
// LeaseDuration (the Lease), PostgresOptions.Lease (the election
// connection's idle_session_timeout: the server ends the silent session
// and its advisory lock). A held connection alone is not a lease. The next
// leader may start while the deposed one, thawed, has not noticed yet:
// that is the fencing window below. After a loss Run campaigns
// again; when lead returns on its own, Run resigns at once and returns its
// error; when Run's context ends, it cancels lead, waits for it, resigns and
// returns nil. No goroutine is left behind once Run returned.
//
// # Fencing
//
// No election can promise that a deposed leader notices before the next one
// starts: a leader cut off from the server learns it only when its session,
// connection check or renew deadline runs out, and meanwhile another
// candidate may already lead. Term.Epoch is the fencing token for that
// window: every later term of the same election has a higher epoch (etcd:
// the leader key's create revision; Postgres: a transaction id read after
// taking the lock; Kubernetes: the Lease's leaseTransitions after taking it,
// plus one, which Kubernetes raises only when the holder changes, so two
// terms of the same candidate with nobody in between share an epoch). A
// leader writes with its epoch, or with a check the store
// enforces (the relay publishes with an expected last sequence), so that
// whatever the deposed leader still tries is refused.
//
// # Setup
//
// etcd: a *clientv3.Client and a key prefix; keys under it hold the
// candidates, each on its session lease (EtcdOptions.TTL). Postgres: a
// connection string for any role (advisory locks need no privilege); the
// lock is pg_try_advisory_lock(hashtextextended(name, 0)), so pick a name
// no other application locks. Kubernetes: a clientset allowed to get,
// create and update Leases in the namespace.
package leader
