package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/dbinformer/dbinformer/core/driver"
)

// UndecodablePolicy says what an informer does with a change its source
// reported but that cannot become a T in the cache: an event with Err set
// (a value a producer wrote in a shape T cannot hold, a row with no
// mapping), or one that InformerOptions.Transform rejects or panics on.
// Either way the error, a *driver.DecodeError naming source, key and version,
// goes to the error path (InformerOptions.ErrorHandler, and
// InformerMetrics.DecodeFailed). What no policy does is keep the key's
// previous object as if it were current: the source has moved past it.
type UndecodablePolicy uint8

const (
	// RemoveUndecodable, the default, takes the key out of the cache:
	// handlers get OnDelete with the last object that decoded and
	// finalStateUnknown true (the source's real state is unknown here), and
	// the informer moves on. The key comes back with its next change that
	// decodes. In a list the key is left out, so a relist deletes it the
	// same way. An event without a key cannot be placed and is only
	// reported.
	RemoveUndecodable UndecodablePolicy = iota
	// StopOnUndecodable stops the informer at the first such change, with
	// an error matching driver.ErrPermanent and wrapping the *driver.DecodeError (Run,
	// WaitForCacheSync and WaitFor return it): nothing of the batch that
	// held it is applied, and the cache stays as it was, frozen (see
	// SharedIndexInformer.Live). For a program that would rather stop than
	// run with a key missing.
	StopOnUndecodable
)

// String names the policy.
func (p UndecodablePolicy) String() string {
	switch p {
	case RemoveUndecodable:
		return "RemoveUndecodable"
	case StopOnUndecodable:
		return "StopOnUndecodable"
	}
	return fmt.Sprintf("UndecodablePolicy(%d)", uint8(p))
}

// undecodable applies the policy to an event that failed with err: it
// reports the *driver.DecodeError and returns the delete that takes the key out
// (ok), nothing (an event without a key), or the permanent error that
// stops the reflector.
func (r *Reflector[T]) undecodable(ctx context.Context, ev *driver.Event[T], err error) (d Delta[T], ok bool, stop error) {
	var de *driver.DecodeError
	if !errors.As(err, &de) {
		de = &driver.DecodeError{Source: r.cfg.name, Key: ev.Key, RV: ev.RV, Err: err}
		err = de
	}
	r.cfg.met.DecodeFailed()
	// A delete whose last object did not decode is still a delete: it
	// leaves nothing stale, so no policy needs to stop for it.
	if r.cfg.undecodable == StopOnUndecodable && ev.Type != driver.Deleted {
		return d, false, driver.Permanent(fmt.Errorf("%w (the informer stops on a change it cannot decode: InformerOptions.Undecodable is StopOnUndecodable)", err))
	}
	r.cfg.rep.report(ctx, err)
	if ev.Key == "" {
		return d, false, nil
	}
	return Delta[T]{Type: DeltaDeleted, Key: ev.Key, RV: ev.RV, Undecodable: true}, true, nil
}
