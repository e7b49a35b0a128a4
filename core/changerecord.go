package core

import "sync"

// changeRecord records, per key, the version of the last change the cache
// applied to it. Two readers need it: an audit, to leave out keys changed
// after its version (auditrun.go), and a checkpoint's save, to write down
// which objects it read in a state later than its version (checkpointrun.go).
// Changes are recorded under the cache's write lock, so a reader holding the
// read lock sees each key's record and its cached state agree.
type changeRecord struct {
	mu      sync.Mutex
	touched map[string]ResourceVersion
}

func newChangeRecord() *changeRecord {
	return &changeRecord{touched: map[string]ResourceVersion{}}
}

// unknownRV marks a key whose change's version is unknown (a relist's
// object): always later than any version asked about.
const unknownRV = ^ResourceVersion(0)

func (t *changeRecord) touch(key string, rv ResourceVersion) {
	t.mu.Lock()
	if old, ok := t.touched[key]; !ok || rv > old {
		t.touched[key] = rv
	}
	t.mu.Unlock()
}

// after reports whether key changed with a version after c.
func (t *changeRecord) after(key string, c ResourceVersion) bool {
	t.mu.Lock()
	rv, ok := t.touched[key]
	t.mu.Unlock()
	return ok && rv > c
}

// collectLater puts into later each of keys changed after c, with the
// version of its last change.
func (t *changeRecord) collectLater(c ResourceVersion, keys []string, later map[string]ResourceVersion) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if rv, ok := t.touched[k]; ok && rv > c {
			later[k] = rv
		}
	}
}

// forget drops the keys whose last change is at c or before: a checkpoint
// at c holds them as they are.
func (t *changeRecord) forget(c ResourceVersion) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, rv := range t.touched {
		if rv <= c {
			delete(t.touched, k)
		}
	}
}
