// Package inplace lets the informer decode a checkpoint's objects in place,
// taking their strings from the bytes it read, with a codec that can
// (codec.Binary), without that ability showing in package codec's API: the
// informer is its only caller, and the decoding's contract (strings that
// alias a buffer nobody may write again) is no user's business.
package inplace

// Decoder decodes objects of one codec in place. It holds scratch space and
// is for one goroutine at a time.
type Decoder[T any] interface {
	// Decode decodes data into *dst, which must hold T's zero value,
	// taking its strings from arena, a string holding data's bytes ("" has
	// each string allocated).
	Decode(data []byte, arena string, dst *T) error
}

// Codec is a codec that decodes in place.
type Codec[T any] interface {
	// NewDecoder returns a Decoder with scratch space of its own.
	NewDecoder() Decoder[T]
	// Total reports whether the codec decodes whatever it encoded (no
	// marshaler from outside the standard library), so that a checked
	// checkpoint may be decoded lazily.
	Total() bool
}

// Of returns c's Codec[T] (as an any) when c decodes in place, else nil.
// Package codec sets it when it is initialized, which it is before any
// codec exists.
var Of = func(c any) any { return nil }

// For returns c's Codec[T], or false when c does not decode in place.
func For[T any](c any) (Codec[T], bool) {
	a, ok := Of(c).(Codec[T])
	return a, ok
}
