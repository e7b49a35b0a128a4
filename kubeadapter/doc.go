// Package kubeinformer feeds dbinformer's informers from a Kubernetes
// apiserver: most programs need only NewResource over a typed client-go
// client, handed to core.NewSharedIndexInformer.
//
//	cms, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, clientset.CoreV1().ConfigMaps(ns),
//		kubeinformer.Options{Namespace: ns})
//	inf := core.NewSharedIndexInformer(cms, core.InformerOptions[*corev1.ConfigMap]{Name: "configmaps"})
//
// The package runs dbinformer's generic core (reflector, queues,
// SharedIndexInformer with WaitFor) over k8s.io/client-go; the directory is
// kubeadapter.
//
// A Resource is a driver.ListerWatcher (and driver.HeadReader,
// driver.ProgressReporter, driver.ProgressIntervaler and driver.HealWaiter) for any
// resource:
//
//   - typed resources, through anything with client-go's List/Watch shape
//     (clientset.CoreV1().ConfigMaps(ns), .Pods(ns), generated CRD
//     clients): NewResource;
//   - any resource, custom resources included, as
//     *unstructured.Unstructured through the dynamic client: NewDynamic.
//
// Neither constructor does I/O. A typed client does not tell its namespace,
// so Options.Namespace says it (for errors and logs, and checked against
// every object the server sends); NewDynamic takes it as an argument.
//
// Keys are "namespace/name" ("name" for cluster-scoped objects), the same as
// client-go's cache.MetaNamespaceKeyFunc, so code moved over from client-go
// informers keeps its keys. Versions are metadata.resourceVersion parsed as
// core.ResourceVersion; the apiserver treats them as opaque, but every
// apiserver backed by etcd issues increasing decimal numbers, and a version
// that is not one fails with an error naming it rather than being misordered.
//
// # Semantics
//
// List pages through the resource (Options.PageSize, default 500): the first
// page is a consistent read, later pages follow its continue token, which
// pins them to the first page's version, so the pages form one snapshot. A
// continue token that expires mid-list fails the List with driver.ErrExpired.
// Watch asks for bookmarks and starts strictly after the given version; 410
// Gone / Expired and "too large resource version" match driver.ErrExpired, and
// the informer then lists from scratch. A 404 on a List or Watch of the
// collection means the resource is not served (its CustomResourceDefinition
// was removed, or never installed) and matches driver.ErrPermanent: the
// informer stops and reports it instead of retrying forever. Label and field
// selectors (Options.LabelSelector, Options.FieldSelector) and the namespace
// of the client apply to List and Watch alike. Deletes carry the object's
// last state (HasObject is true) at the version of the delete. A Watch
// returns an error matching driver.ErrWatchStopped once its context is done.
//
// WaitFor (read your writes): a write to a watched object is seen when its
// event arrives. For a version that touched nothing watched (a write to
// another resource or namespace), the informer asks the watch for progress:
// Kubernetes has no progress request on an open watch, so the watch learns
// the current version H with a one-object consistent list (which also brings
// the apiserver's watch cache up to H) and, unless events pass H first,
// reopens its stream from the last delivered version as a watch of a few
// seconds, which the watch cache ends with a bookmark in order with the
// events. Every bookmark carries a version the server sent; none is
// invented, so none can overtake an event. The cost is one small list per
// request and one short watch every 3s while a request is outstanding.
//
// The watch cache sends a new watch no bookmark at the version of the last
// event it replayed to it, even one the watch's selectors filtered out, so
// when the unwatched write is the newest change in the whole cluster the
// short watch ends without a bookmark (the next one comes with the next
// change of anything: lease renewals make one every 10 seconds on the test
// apiserver). The watch then lists the selected objects twice, at its last
// version (an exact read) and at H or later (from the watch cache once it
// has reached H), keys and versions only: if they are the same, nothing it
// watches changed in between and it answers with a bookmark at the second
// list's version, then reopens its stream from there; if not, the changes
// are on their way and another short watch follows. So a request is
// answered within one short watch (about 3s) plus two lists, not whenever
// the cluster next writes something. WaitFor for a version of a watched
// object does not depend on this: its event arrives at once.
//
// A Resource is also a driver.HealWaiter: while the informer backs off after
// a failure, it probes the apiserver and ends the sleep as soon as the
// apiserver answers again (after a restart, a network outage), instead of
// letting the informer finish a sleep of up to 30 seconds.
//
// A Resource declares a progress interval (driver.ProgressIntervaler,
// Options.ProgressInterval, DefaultProgressInterval = 10s): after each
// interval without events the informer makes the progress request above,
// and reopens a watch that answers none for driver.StuckIntervals intervals
// (an apiserver that stopped answering, a connection gone half-open),
// reporting it (driver.ErrWatchStuck). The request's head read is bounded to
// 5s, so a silent apiserver usually ends the watch sooner, with that read's
// error. A negative Options.ProgressInterval turns this off, and saves the
// idle watch its one small list per interval.
//
// # Partial sync
//
// Resource.Where (package filter) returns a Resource that syncs only what a
// filter matches. Top-level Eq and In on labels ("metadata.labels.tier")
// are added to the label selector, Eq on metadata.name and
// metadata.namespace to the field selector; the apiserver evaluates those.
// The rest is evaluated here on each object. An object that starts
// matching reaches handlers as an add, one that stops as a delete carrying
// its last matching state (the apiserver reports an object whose labels
// left the selector as deleted with its new state; the informer hands
// handlers the cached one instead).
//
// # Setup and permissions
//
// The client's identity needs list and watch on the resource (RBAC verbs
// "list" and "watch"), nothing else. Build the clients from a rest.Config:
// LoadConfig finds one as kubectl does (a file you name, $KUBECONFIG,
// ~/.kube/config, else the pod's service account) and NewClientset makes
// the typed clientset from it in the same step, or build it as usual;
// TLS and authentication options pass through client-go untouched. Raise
// rest.Config.QPS/Burst if many informers share one config: progress requests
// and relists are ordinary requests.
//
// Timeouts: leave rest.Config.Timeout at zero on the config of the clients
// you pass in (it bounds whole requests, watches included, so a watch would
// end every Timeout); a Resource bounds its own short requests (the progress
// request's head read, WaitHealed's probes). A dead connection is found by
// client-go's HTTP/2 health check (a ping after 30s without a frame, given
// 15s to answer; the HTTP2_READ_IDLE_TIMEOUT_SECONDS and
// HTTP2_PING_TIMEOUT_SECONDS environment variables change them) and, sooner,
// by the progress interval above. rest.Config.Dial (a net.Dialer with a
// Timeout and KeepAlive) bounds connecting to an apiserver that is gone.
//
// # Failures that say why
//
// A List or Watch that fails returns client-go's error, wrapped with the
// source and what was asked, so the informer's error handler, sync status
// and WaitForCacheSync name it: connection refused, 401 (the credentials
// were not accepted) and 403 (the user lacks the RBAC verbs; the
// apiserver's message names user, verb and resource) are retried, since
// tokens rotate and roles get granted. client-go itself repeats a GET cut
// short (EOF, connection reset) and a request answered with Retry-After
// (429, a 5xx while the apiserver starts), up to ten times about a second
// apart, before it returns the last error: for those ten seconds the list
// reports nothing yet. A watch request client-go gives up on that way
// comes back as a watch that ends at once without its error; a Resource
// reopens it once, then ends the watch with the error of a read of the
// head, and a watch open that gets no answer within 5s ends with the error
// client-go's retries ran into.
//
// The package is named kubeinformer, like the other adapters
// (etcdinformer, pginformer, natsinformer); its directory is kubeadapter.
// Import it as
//
//	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
//
// The kubetest subpackage holds the test harnesses (conformance.Harness)
// over a real kube-apiserver.
package kubeinformer
