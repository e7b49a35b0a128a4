package shard

import "github.com/dbinformer/dbinformer/core"

// HandlerFuncs are event handlers that get the Ticket of the work: its
// shard and term (hand the term to what the handler writes). nil functions
// ignore their calls.
type HandlerFuncs[T any] struct {
	AddFunc    func(t Ticket, key string, obj T, isInInitialList bool)
	UpdateFunc func(t Ticket, key string, oldObj, newObj T)
	DeleteFunc func(t Ticket, key string, obj T, finalStateUnknown bool)
}

// Handler gates f by sh: each event is handed to f only under a Ticket
// (Begin), so only while this replica owns the key's shard and is not
// handing it off, and a handoff waits for the calls in flight. The leave
// events of a handoff (the keys of a shard that moved away leaving the
// cache) are therefore not handed to f: the keys were not deleted, their
// new owner handles them. The enter events of a load are.
func Handler[T any](sh *Sharder, f HandlerFuncs[T]) core.ResourceEventHandler[T] {
	return gated[T]{sh: sh, f: f}
}

type gated[T any] struct {
	sh *Sharder
	f  HandlerFuncs[T]
}

func (g gated[T]) OnAdd(key string, obj T, initial bool) {
	if g.f.AddFunc == nil {
		return
	}
	if t, ok := g.sh.Begin(key); ok {
		defer t.Done()
		g.f.AddFunc(t, key, obj, initial)
	}
}

func (g gated[T]) OnUpdate(key string, oldObj, newObj T) {
	if g.f.UpdateFunc == nil {
		return
	}
	if t, ok := g.sh.Begin(key); ok {
		defer t.Done()
		g.f.UpdateFunc(t, key, oldObj, newObj)
	}
}

func (g gated[T]) OnDelete(key string, obj T, finalStateUnknown bool) {
	if g.f.DeleteFunc == nil {
		return
	}
	if t, ok := g.sh.Begin(key); ok {
		defer t.Done()
		g.f.DeleteFunc(t, key, obj, finalStateUnknown)
	}
}
