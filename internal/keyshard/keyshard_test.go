package keyshard

import (
	"hash/fnv"
	"testing"
)

// The hash never changes: relays and replicas of different builds must
// put a key in the same shard.
func TestStable(t *testing.T) {
	if got := Mix(0x9e3779b97f4a7c15); got != 0xe220a8397b1dcdaf {
		t.Errorf("Mix(golden ratio) = %#x, want splitmix64's first output 0xe220a8397b1dcdaf", got)
	}
	for _, key := range []string{"", "a", "k00", "row-1", "\xff\x00"} {
		h := fnv.New64a()
		h.Write([]byte(key))
		if got, want := Hash(key), Mix(h.Sum64()); got != want {
			t.Errorf("Hash(%q) = %#x, want Mix(FNV-1a) = %#x", key, got, want)
		}
		for _, n := range []int{1, 7, 64} {
			if s := Of(key, n); s < 0 || s >= n || uint64(s) != Hash(key)%uint64(n) {
				t.Errorf("Of(%q, %d) = %d", key, n, s)
			}
		}
	}
}
