package core

// ResourceEventHandlerFuncs adapts functions to ResourceEventHandler; nil
// functions ignore their calls.
type ResourceEventHandlerFuncs[T any] struct {
	// Name names the handler in errors, metrics and the status page when
	// HandlerOptions.Name is empty (without either it is named by its type
	// and registration number, "core.ResourceEventHandlerFuncs[main.Order]#1").
	Name       string
	AddFunc    func(key string, obj T, isInInitialList bool)
	UpdateFunc func(key string, oldObj, newObj T)
	DeleteFunc func(key string, obj T, finalStateUnknown bool)
}

var _ ResourceEventHandler[int] = ResourceEventHandlerFuncs[int]{}

func (f ResourceEventHandlerFuncs[T]) OnAdd(key string, obj T, initial bool) {
	if f.AddFunc != nil {
		f.AddFunc(key, obj, initial)
	}
}

func (f ResourceEventHandlerFuncs[T]) OnUpdate(key string, oldObj, newObj T) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(key, oldObj, newObj)
	}
}

func (f ResourceEventHandlerFuncs[T]) OnDelete(key string, obj T, unknown bool) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(key, obj, unknown)
	}
}

// handlerName is the name a handler gives itself, "" when none.
func handlerName(h any) string {
	switch h := h.(type) {
	case interface{ HandlerName() string }:
		return h.HandlerName()
	case interface{ handlerFuncsName() string }:
		return h.handlerFuncsName()
	}
	return ""
}

func (f ResourceEventHandlerFuncs[T]) handlerFuncsName() string { return f.Name }
