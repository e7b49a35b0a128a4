package workqueue

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/dbinformer/dbinformer/core/clock"
)

// RateLimiter decides how long an item waits before it is retried.
// It is client-go's TypedRateLimiter.
type RateLimiter[K comparable] interface {
	// When returns how long item should wait, and counts a failure.
	When(item K) time.Duration
	// Forget stops tracking item, after success or after giving up; the next
	// failure starts from the first delay again.
	Forget(item K)
	// NumRequeues is how many failures are being tracked for item.
	NumRequeues(item K) int
}

// DefaultControllerRateLimiter is client-go's default for controllers: the
// worse of a per-item exponential backoff (5 ms doubling to 1000 s) and an
// overall token bucket of 10 qps with a burst of 100. c times the bucket;
// nil means the wall clock.
func DefaultControllerRateLimiter[K comparable](c clock.Clock) RateLimiter[K] {
	return NewMaxOfRateLimiter(
		NewItemExponentialFailureRateLimiter[K](5*time.Millisecond, 1000*time.Second),
		&BucketRateLimiter[K]{Limiter: rate.NewLimiter(rate.Limit(10), 100), Clock: c},
	)
}

// DefaultItemBasedRateLimiter is client-go's per-item only default:
// exponential from 1 ms to 1000 s.
func DefaultItemBasedRateLimiter[K comparable]() RateLimiter[K] {
	return NewItemExponentialFailureRateLimiter[K](time.Millisecond, 1000*time.Second)
}

// BucketRateLimiter spreads all retries, whatever the item, through one
// token bucket. It tracks no items: NumRequeues is always 0.
type BucketRateLimiter[K comparable] struct {
	Limiter *rate.Limiter
	// Clock is the time the bucket refills by; nil means the wall clock.
	// x/time/rate's plain Reserve reads time.Now itself, which would make
	// the bucket untestable with a fake clock.
	Clock clock.Clock
}

var _ RateLimiter[string] = (*BucketRateLimiter[string])(nil)

func (r *BucketRateLimiter[K]) When(K) time.Duration {
	now := clock.Or(r.Clock).Now()
	return r.Limiter.ReserveN(now, 1).DelayFrom(now)
}

func (r *BucketRateLimiter[K]) Forget(K) {}

func (r *BucketRateLimiter[K]) NumRequeues(K) int { return 0 }

// ItemExponentialFailureRateLimiter waits baseDelay*2^failures, capped at
// maxDelay, per item.
type ItemExponentialFailureRateLimiter[K comparable] struct {
	mu        sync.Mutex
	failures  map[K]int
	baseDelay time.Duration
	maxDelay  time.Duration
}

var _ RateLimiter[string] = (*ItemExponentialFailureRateLimiter[string])(nil)

func NewItemExponentialFailureRateLimiter[K comparable](baseDelay, maxDelay time.Duration) *ItemExponentialFailureRateLimiter[K] {
	return &ItemExponentialFailureRateLimiter[K]{failures: map[K]int{}, baseDelay: baseDelay, maxDelay: maxDelay}
}

func (r *ItemExponentialFailureRateLimiter[K]) When(item K) time.Duration {
	r.mu.Lock()
	exp := r.failures[item]
	r.failures[item] = exp + 1
	r.mu.Unlock()
	return backoff(r.baseDelay, r.maxDelay, exp)
}

// backoff is base<<exp capped at max, in integers: the shift is only taken
// when it cannot overflow, so a long-failing item stays at max instead of
// wrapping to a negative (immediate) delay.
func backoff(base, max time.Duration, exp int) time.Duration {
	if base <= 0 {
		return 0
	}
	if exp >= 63 || base > max>>uint(exp) {
		return max
	}
	return base << uint(exp)
}

func (r *ItemExponentialFailureRateLimiter[K]) Forget(item K) {
	r.mu.Lock()
	delete(r.failures, item)
	r.mu.Unlock()
}

func (r *ItemExponentialFailureRateLimiter[K]) NumRequeues(item K) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[item]
}

// ItemFastSlowRateLimiter retries an item after fastDelay for its first
// maxFastAttempts failures and after slowDelay from then on.
type ItemFastSlowRateLimiter[K comparable] struct {
	mu              sync.Mutex
	failures        map[K]int
	fastDelay       time.Duration
	slowDelay       time.Duration
	maxFastAttempts int
}

var _ RateLimiter[string] = (*ItemFastSlowRateLimiter[string])(nil)

func NewItemFastSlowRateLimiter[K comparable](fastDelay, slowDelay time.Duration, maxFastAttempts int) *ItemFastSlowRateLimiter[K] {
	return &ItemFastSlowRateLimiter[K]{failures: map[K]int{}, fastDelay: fastDelay, slowDelay: slowDelay, maxFastAttempts: maxFastAttempts}
}

func (r *ItemFastSlowRateLimiter[K]) When(item K) time.Duration {
	r.mu.Lock()
	n := r.failures[item] + 1
	r.failures[item] = n
	r.mu.Unlock()
	if n <= r.maxFastAttempts {
		return r.fastDelay
	}
	return r.slowDelay
}

func (r *ItemFastSlowRateLimiter[K]) Forget(item K) {
	r.mu.Lock()
	delete(r.failures, item)
	r.mu.Unlock()
}

func (r *ItemFastSlowRateLimiter[K]) NumRequeues(item K) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[item]
}

// MaxOfRateLimiter asks every limiter and waits for the longest answer.
// Every limiter is asked, so each counts the failure. Combined with a token
// bucket, the bucket's burst can appear exceeded when some items were held
// back longer by another limiter.
type MaxOfRateLimiter[K comparable] struct {
	limiters []RateLimiter[K]
}

var _ RateLimiter[string] = (*MaxOfRateLimiter[string])(nil)

func NewMaxOfRateLimiter[K comparable](limiters ...RateLimiter[K]) *MaxOfRateLimiter[K] {
	return &MaxOfRateLimiter[K]{limiters: limiters}
}

func (r *MaxOfRateLimiter[K]) When(item K) time.Duration {
	var d time.Duration
	for _, l := range r.limiters {
		d = max(d, l.When(item))
	}
	return d
}

func (r *MaxOfRateLimiter[K]) Forget(item K) {
	for _, l := range r.limiters {
		l.Forget(item)
	}
}

func (r *MaxOfRateLimiter[K]) NumRequeues(item K) int {
	n := 0
	for _, l := range r.limiters {
		n = max(n, l.NumRequeues(item))
	}
	return n
}

// WithMaxWaitRateLimiter caps another limiter's delay at maxDelay.
type WithMaxWaitRateLimiter[K comparable] struct {
	limiter  RateLimiter[K]
	maxDelay time.Duration
}

var _ RateLimiter[string] = (*WithMaxWaitRateLimiter[string])(nil)

func NewWithMaxWaitRateLimiter[K comparable](limiter RateLimiter[K], maxDelay time.Duration) *WithMaxWaitRateLimiter[K] {
	return &WithMaxWaitRateLimiter[K]{limiter: limiter, maxDelay: maxDelay}
}

func (r *WithMaxWaitRateLimiter[K]) When(item K) time.Duration {
	return min(r.limiter.When(item), r.maxDelay)
}

func (r *WithMaxWaitRateLimiter[K]) Forget(item K) { r.limiter.Forget(item) }

func (r *WithMaxWaitRateLimiter[K]) NumRequeues(item K) int { return r.limiter.NumRequeues(item) }
