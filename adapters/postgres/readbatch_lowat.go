//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pginformer

import "syscall"

// setLowat sets the socket's receive low-water mark.
func setLowat(fd uintptr, n int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
}
