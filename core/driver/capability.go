package driver

import "reflect"

// Capability returns the optional interface C (ProgressReporter,
// HeadReader, HealWaiter, ProgressIntervaler, CodecProvider[T], Restorer[T],
// DurableAcknowledger, AuditLister[T], SupersededSkipper) as implemented by lw or by a ListerWatcher lw wraps,
// and false when none of them implements it. Every place the library looks
// for an optional interface goes through it; code of your own that looks
// for one should too, or it will miss it behind a wrapper.
//
// It asks lw first, then what lw wraps, and so on down the chain, where
// what a wrapper wraps is
//
//   - what its Unwrap() ListerWatcher[T] method returns (filter.Wrap and
//     informertest.Spy have one), as net/http's ResponseController finds
//     a ResponseWriter's capabilities; or else
//   - the ListerWatcher[T] a struct embeds, as in
//     struct{ driver.ListerWatcher[T]; log *slog.Logger } (through a pointer
//     too): the wrapper Go programmers write by default, whose method set
//     has only List and Watch.
//
// Because lw is asked first, a wrapper that implements C itself overrides
// what lies beneath: that is how a wrapper whose Watch changes what a
// capability promises (one that drops Bookmarks cannot report progress)
// corrects or hides it, for example with ReportsProgress returning false.
func Capability[C any, T any](lw ListerWatcher[T]) (C, bool) {
	// The bound guards against a chain that loops; no real chain comes
	// near it.
	for range 64 {
		if lw == nil {
			break
		}
		if c, ok := lw.(C); ok {
			return c, true
		}
		if lw = Unwrap(lw); lw == nil {
			break
		}
	}
	var zero C
	return zero, false
}

// unwrapper is implemented by a ListerWatcher that wraps another (see
// Capability).
type unwrapper[T any] interface {
	Unwrap() ListerWatcher[T]
}

// Unwrap returns what lw wraps, as Capability sees it (its Unwrap method,
// else the ListerWatcher its struct embeds), or nil when lw wraps nothing.
// The informer follows it down to name its source's kind
// (SharedIndexInformer.Source) beneath the wrappers.
func Unwrap[T any](lw ListerWatcher[T]) ListerWatcher[T] {
	if u, ok := lw.(unwrapper[T]); ok {
		return u.Unwrap()
	}
	v := reflect.ValueOf(lw)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		// Only an embedded interface hides methods: an embedded concrete
		// type's methods are promoted, and lw.(C) already found them.
		if !f.Anonymous || !f.IsExported() || f.Type.Kind() != reflect.Interface {
			continue
		}
		if inner, ok := v.Field(i).Interface().(ListerWatcher[T]); ok && inner != nil {
			return inner
		}
	}
	return nil
}
