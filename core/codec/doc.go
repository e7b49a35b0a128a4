// Package codec turns objects into bytes and back: Codec, with JSON (every
// adapter's default), Raw (bytes as they are), Binary (compact, for
// checkpoints of plain structs) and Funcs (your own two functions).
//
// It is for a program that chooses how its objects are stored (an etcd or
// NATS adapter's Options.Codec, core.CheckpointOptions.Codec, a relay) and
// for adapter authors, who decode a source's bytes with Decode so that a
// codec's panic becomes an error. A program that keeps the defaults needs
// nothing from it, which is why it is not part of core.
package codec
