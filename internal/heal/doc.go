// Package heal is the heal-probe loop the etcd and Kubernetes adapters
// share for driver.HealWaiter: probe the server at once, then more and more
// rarely, and report when it answers again. It lives here, not in core,
// because core imports no client, and not in either adapter, because
// adapters do not import each other.
package heal
