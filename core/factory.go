package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/dbinformer/dbinformer/core/driver"
)

// Factory shares informers: one per (source name, object type), however
// many parts of a program ask for it, so that a source is listed and
// watched once. Go methods cannot have type parameters, so informers are
// obtained with the generic function InformerFor. The zero value is an
// empty factory ready to use; NewFactory returns one too.
type Factory struct {
	mu           sync.Mutex
	informers    map[factoryKey]factoryInformer
	order        []factoryKey
	started      map[factoryKey]bool
	cancels      []context.CancelFunc
	wg           sync.WaitGroup
	shuttingDown bool
}

type factoryKey struct {
	source string
	typ    reflect.Type
}

// factoryInformer is what the factory needs of a SharedIndexInformer[T],
// whatever T.
type factoryInformer interface {
	Run(ctx context.Context) error
	WaitForCacheSync(ctx context.Context) error
	Name() string
}

// NewFactory returns an empty factory.
func NewFactory() *Factory { return &Factory{} }

// initLocked makes the zero Factory usable.
func (f *Factory) initLocked() {
	if f.informers == nil {
		f.informers = map[factoryKey]factoryInformer{}
		f.started = map[factoryKey]bool{}
	}
}

// InformerFor returns the factory's informer for (source, T), creating it
// from lw and opts on first use; later calls get the same informer and
// their lw and opts are ignored. opts.Name defaults to source.
func InformerFor[T any](f *Factory, source string, lw driver.ListerWatcher[T], opts InformerOptions[T]) *SharedIndexInformer[T] {
	k := factoryKey{source: source, typ: reflect.TypeFor[T]()}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	if inf, ok := f.informers[k]; ok {
		return inf.(*SharedIndexInformer[T])
	}
	if opts.Name == "" {
		opts.Name = source
	}
	inf := NewSharedIndexInformer(lw, opts)
	f.informers[k] = inf
	f.order = append(f.order, k)
	return inf
}

// Start runs every informer not started yet, until ctx is done or
// Shutdown. It can be called again to start informers created since;
// after Shutdown it does nothing.
func (f *Factory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shuttingDown {
		return
	}
	f.initLocked()
	for _, k := range f.order {
		if f.started[k] {
			continue
		}
		f.started[k] = true
		inf := f.informers[k]
		ictx, cancel := context.WithCancel(ctx)
		f.cancels = append(f.cancels, cancel)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer cancel()
			_ = inf.Run(ictx)
		}()
	}
}

// WaitForCacheSync waits until every started informer has synced. The
// error names each informer that did not, and why.
func (f *Factory) WaitForCacheSync(ctx context.Context) error {
	f.mu.Lock()
	var infs []factoryInformer
	for _, k := range f.order {
		if f.started[k] {
			infs = append(infs, f.informers[k])
		}
	}
	f.mu.Unlock()
	var errs []error
	for _, inf := range infs {
		if err := inf.WaitForCacheSync(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("dbinformer factory: %w", errors.Join(errs...))
	}
	return nil
}

// Shutdown stops every informer the factory started and waits until all
// their goroutines have ended. Start does nothing afterwards.
func (f *Factory) Shutdown() {
	f.mu.Lock()
	f.shuttingDown = true
	cancels := f.cancels
	f.cancels = nil
	f.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	f.wg.Wait()
}
