//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package pginformer

import "errors"

// setLowat: this platform's syscall package has no SO_RCVLOWAT, so the
// stream reads eagerly (see readbatch.go).
func setLowat(uintptr, int) error { return errors.ErrUnsupported }
