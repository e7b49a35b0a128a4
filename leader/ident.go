package leader

import (
	"crypto/rand"
	"encoding/hex"
	"os"
)

func randomIdentity() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	if host == "" {
		host = "candidate"
	}
	return host + "-" + hex.EncodeToString(b[:])
}
