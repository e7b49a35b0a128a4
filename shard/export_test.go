package shard

// OwnAll makes s pass every shard from the start, without a handoff: the
// conformance suite runs it as a plain ListerWatcher.
func OwnAll[T any](s *Source[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.set {
		s.set[i] = true
	}
}

// Own makes s pass exactly shards, without a handoff.
func Own[T any](s *Source[T], shards ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.set {
		s.set[i] = false
	}
	for _, sh := range shards {
		s.set[sh] = true
	}
}

// KubeChange is kubeChange, for the test of which Lease events wake a round.
var KubeChange = kubeChange
