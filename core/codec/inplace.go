package codec

import "github.com/dbinformer/dbinformer/core/internal/inplace"

// The informer decodes a checkpoint's objects in place through package
// inplace (core/internal/inplace), which finds Binary's in-place decoding
// here: an unexported method, so that it stays out of Binary's API.
func init() {
	inplace.Of = func(c any) any {
		if a, ok := c.(interface{ inplaceCodec() any }); ok {
			return a.inplaceCodec()
		}
		return nil
	}
}

// inplaceCodec returns b as an inplace.Codec[T].
func (b *Binary[T]) inplaceCodec() any { return binInplace[T]{b} }

// binInplace is a Binary as an inplace.Codec.
type binInplace[T any] struct{ b *Binary[T] }

// Total implements inplace.Codec.
func (a binInplace[T]) Total() bool { return a.b.total() }

// NewDecoder implements inplace.Codec.
func (a binInplace[T]) NewDecoder() inplace.Decoder[T] { return &binInplaceDecoder[T]{b: a.b} }

// binInplaceDecoder is a Binary's inplace.Decoder, with its scratch decoder:
// one allocation per Decoder rather than per object.
type binInplaceDecoder[T any] struct {
	b *Binary[T]
	d binDecoder
}

// Decode implements inplace.Decoder.
func (x *binInplaceDecoder[T]) Decode(data []byte, arena string, dst *T) error {
	return x.b.decodeArena(&x.d, data, arena, dst)
}
