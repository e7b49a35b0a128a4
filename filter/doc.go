// Package filter is partial sync: one filter model for every source, so
// that an informer caches only the objects it needs (a tenant's rows, the
// active orders, one namespace) without paying for the rest.
//
// A filter is built from conditions over named fields, like a WHERE
// clause: Eq, In, the ranges Lt, Le, Gt, Ge, Prefix, combined with And
// and Or; Where is the escape hatch, a func(T) bool evaluated after
// decoding. New checks the expression against the object type once, by
// reflection (field names by `db` tag, `json` tag or Go name, dotted paths
// through nested structs and string-keyed maps, Key for the object's key in
// its source), and refuses unknown fields and values of the wrong type
// with an error naming both.
//
// Adapters take a *Filter in their options. Each pushes down to its
// source what the source can evaluate (Filter.Split: etcd key ranges, NATS
// subject filters, Kubernetes label and field selectors, a Postgres WHERE
// and publication row filter) and evaluates the residue itself, on each
// object it decodes; each adapter's documentation says which is which.
// Mark a condition Server to demand push-down: an adapter that cannot
// refuses the filter at construction. Wrap filters any other
// ListerWatcher on this side.
//
// Handlers see enter/leave semantics: an object that starts matching
// arrives as an add, one that stops matching leaves as a delete carrying
// its last matching state (the cached one), also across a relist, where
// it is a delete with finalStateUnknown like any key a relist no longer
// finds. Versions that changed only filtered-out objects still advance the
// informer's version, so WaitFor keeps its meaning. A warm restart from a
// checkpoint (core.CheckpointOptions) keeps the semantics: what left or
// entered the filter while the informer was down arrives as deletes and
// adds once it watches again. A checkpoint holds what matched the filter it
// was taken under: when the filter changes, change the checkpoint's Name
// too (for example append f.String()), or the warm start serves objects
// the new filter does not match until they change.
//
// The core needed no change for these semantics: the informer already
// drops a delete for a key it does not hold, fills in a delete without
// object from its cache, and turns a change of a key it does not hold into
// an add. Filter.Keep and Filter.Rewrite are how an adapter uses that.
package filter
