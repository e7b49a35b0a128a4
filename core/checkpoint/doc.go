// Package checkpoint is where an informer keeps its checkpoints: the Store
// contract and DirStore, the local-directory default.
//
// It is for a program that turns on warm restarts (core.CheckpointOptions
// takes a Store) and for whoever writes a Store of their own (an object
// store, a database table). The informer writes and reads the checkpoint's
// bytes itself; a Store only keeps them, atomically, under a name. Users
// who never checkpoint need nothing from this package, which is why it is
// not part of core.
package checkpoint
