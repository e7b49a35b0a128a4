package codec

import (
	"encoding/json"
	"fmt"
)

// Codec turns an object into bytes and back. Adapters whose sources store
// bytes (etcd values, NATS messages) decode with it; checkpoints and relays
// encode with it.
//
// Decode must not retain data: the buffer may belong to a client library
// and be reused once Decode returns. A Codec must be safe for concurrent use.
type Codec[T any] interface {
	Encode(obj T) ([]byte, error)
	Decode(data []byte) (T, error)
}

// JSON encodes objects with encoding/json. It is every adapter's default.
type JSON[T any] struct{}

// Encode marshals obj.
func (JSON[T]) Encode(obj T) ([]byte, error) { return json.Marshal(obj) }

// Decode unmarshals data into a new T (encoding/json copies what it keeps).
func (JSON[T]) Decode(data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

// Raw passes bytes through, for a ListerWatcher[[]byte]. Decode copies, so
// that it never retains its input.
type Raw struct{}

// Encode returns obj itself.
func (Raw) Encode(obj []byte) ([]byte, error) { return obj, nil }

// Decode returns a copy of data.
func (Raw) Decode(data []byte) ([]byte, error) { return append([]byte(nil), data...), nil }

// Funcs builds a Codec from two functions. A nil EncodeFunc makes
// Encode fail (a source that only decodes never calls it; a checkpoint
// reports the error).
type Funcs[T any] struct {
	EncodeFunc func(T) ([]byte, error)
	DecodeFunc func([]byte) (T, error)
}

// Encode calls EncodeFunc.
func (c Funcs[T]) Encode(obj T) ([]byte, error) {
	if c.EncodeFunc == nil {
		return nil, fmt.Errorf("dbinformer: this codec cannot encode (codec.Funcs.EncodeFunc is nil)")
	}
	return c.EncodeFunc(obj)
}

// Decode calls DecodeFunc.
func (c Funcs[T]) Decode(data []byte) (T, error) { return c.DecodeFunc(data) }

// Decode runs c.Decode and turns a panic into an error, so that one value
// that crashes a codec cannot take a watch or a list down. Adapters call it
// and wrap a failure in a *DecodeError naming source, key and version.
func Decode[T any](c Codec[T], data []byte) (obj T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("codec panicked: %v", r)
		}
	}()
	return c.Decode(data)
}

// Encode runs c.Encode and turns a panic into an error.
func Encode[T any](c Codec[T], obj T) (data []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("codec panicked: %v", r)
		}
	}()
	return c.Encode(obj)
}

var (
	_ Codec[struct{}] = JSON[struct{}]{}
	_ Codec[[]byte]   = Raw{}
	_ Codec[int]      = Funcs[int]{}
)
