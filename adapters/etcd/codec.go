package etcd

import "encoding/json"

// Codec turns an etcd value into a T. The adapter only reads, so a codec
// only decodes. Decode may keep data: the client gives every value its own
// slice, which nothing else writes to.
type Codec[T any] interface {
	Decode(data []byte) (T, error)
}

// DecodeFunc adapts a function to a Codec.
type DecodeFunc[T any] func(data []byte) (T, error)

// Decode calls f.
func (f DecodeFunc[T]) Decode(data []byte) (T, error) { return f(data) }

// JSON decodes values with encoding/json. It is the default codec.
type JSON[T any] struct{}

// Decode unmarshals data into a new T.
func (JSON[T]) Decode(data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

// Raw passes values through as bytes, for a ListerWatcher[[]byte].
type Raw struct{}

// Decode returns data itself (see Codec on why that is safe).
func (Raw) Decode(data []byte) ([]byte, error) { return data, nil }

var (
	_ Codec[struct{}] = JSON[struct{}]{}
	_ Codec[[]byte]   = Raw{}
	_ Codec[int]      = DecodeFunc[int](nil)
)
