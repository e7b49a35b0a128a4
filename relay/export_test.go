package relay

// MessagesRead is how many messages d has parsed (lists, watches, audits).
func MessagesRead[T any](d *Downstream[T]) uint64 { return d.read.Load() }
