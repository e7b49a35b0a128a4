// Command killchild is the informer process that the reliability suite's
// kill fault (TestKillRestart) runs as a child and kills with SIGKILL at a
// random instant: a checkpointing informer (core.CheckpointOptions over a
// checkpoint.DirStore, saving every 20ms) over one of the adapters, chosen
// by -adapter:
//
//   - postgres: a table of pgtest rows (k text, v bigint) on a permanent
//     slot (-table, -slot); $KILLCHILD_CONN is the connection string.
//   - etcd: the etcdtest.Items below a prefix (-prefix); $KILLCHILD_CONN is
//     the server's client URL.
//   - nats-kv: the natstest.Objs of a KV bucket below "w." (-bucket);
//     $KILLCHILD_CONN is the nats-server URL.
//   - nats-stream: an event stream folded with natstest.Reduce (-stream,
//     -filter); $KILLCHILD_CONN is the nats-server URL.
//   - kube: the ConfigMaps of a namespace (-namespace), their version in
//     data[kubetest.VersionKey]; $KILLCHILD_CONN is the path of a
//     kubeconfig.
//
// The connection string is never printed (a kubeconfig holds a token; the
// child reads the file, not the token from its environment).
//
// It prints "loaded <rv>" when it started from a checkpoint, "lists <n>"
// (how many Lists it made before it synced), and "BACKWARDS ..." on stderr
// when a handler sees a key's version go backwards. With -final it waits
// until synced and caught up with the server's head, prints "lists <n>"
// again (every List it made, so a warm start whose watch was refused and
// relisted shows here), the cache as JSON ("state {...}", keyed as the
// informer keys objects) and exits.
package main
