// Command killchild is the informer process that the reliability suite's
// kill fault (TestKillRestart) runs as a child and kills with SIGKILL at a
// random instant: a checkpointing informer over a Postgres table of
// pgtest rows (k text, v bigint) on a permanent slot. It reads the
// connection string from $KILLCHILD_CONN (never printed).
//
// It prints "loaded <rv>" when it started from a checkpoint, "lists <n>"
// (how many Lists it made before it synced), and
// "BACKWARDS ..." on stderr when a handler sees a key's version go
// backwards. With -final it waits until synced and caught up with the
// server's head, prints the cache as JSON ("state {...}") and exits.
package main
