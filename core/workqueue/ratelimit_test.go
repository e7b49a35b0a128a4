package workqueue

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/dbinformer/dbinformer/core/clock"
)

func TestExponentialLimiter(t *testing.T) {
	l := NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second)
	for i, want := range []time.Duration{1, 2, 4, 8, 16} {
		if got := l.When("a"); got != want*time.Millisecond {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want*time.Millisecond)
		}
	}
	if n := l.NumRequeues("a"); n != 5 {
		t.Fatalf("NumRequeues = %d", n)
	}
	if got := l.When("b"); got != time.Millisecond {
		t.Fatalf("other item When = %v: items must be independent", got)
	}
	for range 20 {
		l.When("a")
	}
	if got := l.When("a"); got != time.Second {
		t.Fatalf("capped When = %v", got)
	}
	l.Forget("a")
	if n := l.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
	if got := l.When("a"); got != time.Millisecond {
		t.Fatalf("When after Forget = %v", got)
	}
}

func TestExponentialLimiterOverflow(t *testing.T) {
	for _, tc := range []struct {
		base, max time.Duration
		failures  int
		want      time.Duration
	}{
		{time.Millisecond, 1000 * time.Second, 5, 32 * time.Millisecond},
		{time.Millisecond, 1000 * time.Second, 1000, 1000 * time.Second},
		{time.Millisecond, math.MaxInt64, 62, math.MaxInt64}, // 1e6<<62 overflows
		{1, math.MaxInt64, 62, 1 << 62},
		{1, math.MaxInt64, 63, math.MaxInt64},
		{5 * time.Millisecond, 1000 * time.Second, 17, 655360 * time.Millisecond},
		{5 * time.Millisecond, 1000 * time.Second, 18, 1000 * time.Second},
		{0, time.Second, 100, 0},
	} {
		l := NewItemExponentialFailureRateLimiter[int](tc.base, tc.max)
		var got time.Duration
		for range tc.failures + 1 {
			got = l.When(1)
		}
		if got != tc.want || got < 0 {
			t.Errorf("base %v max %v after %d failures: When = %v, want %v", tc.base, tc.max, tc.failures, got, tc.want)
		}
	}
}

func TestFastSlowLimiter(t *testing.T) {
	l := NewItemFastSlowRateLimiter[string](5*time.Millisecond, 10*time.Second, 3)
	for i, want := range []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, 10 * time.Second, 10 * time.Second} {
		if got := l.When("a"); got != want {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want)
		}
	}
	if n := l.NumRequeues("a"); n != 5 {
		t.Fatalf("NumRequeues = %d", n)
	}
	if got := l.When("b"); got != 5*time.Millisecond {
		t.Fatalf("other item When = %v", got)
	}
	l.Forget("a")
	if n, got := l.NumRequeues("a"), l.When("a"); n != 0 || got != 5*time.Millisecond {
		t.Fatalf("after Forget: NumRequeues = %d, When = %v", n, got)
	}
}

func TestMaxOfLimiter(t *testing.T) {
	l := NewMaxOfRateLimiter(
		NewItemFastSlowRateLimiter[string](5*time.Millisecond, 3*time.Second, 3),
		NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second),
	)
	for i, want := range []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, 3 * time.Second, 3 * time.Second} {
		if got := l.When("a"); got != want {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want)
		}
	}
	if n := l.NumRequeues("a"); n != 5 {
		t.Fatalf("NumRequeues = %d", n)
	}
	l.Forget("a")
	if n := l.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d: Forget must reach every limiter", n)
	}
}

func TestWithMaxWaitLimiter(t *testing.T) {
	l := NewWithMaxWaitRateLimiter(NewItemExponentialFailureRateLimiter[string](time.Second, time.Hour), 3*time.Second)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if got := l.When("a"); got != want {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want)
		}
	}
	if n := l.NumRequeues("a"); n != 4 {
		t.Fatalf("NumRequeues = %d", n)
	}
	l.Forget("a")
	if n := l.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
}

func TestBucketLimiterUsesClock(t *testing.T) {
	clk := clock.NewFake(epoch)
	l := &BucketRateLimiter[string]{Limiter: rate.NewLimiter(10, 2), Clock: clk}
	for i, want := range []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond} {
		if got := l.When("x"); got != want {
			t.Fatalf("call %d: When = %v, want %v", i, got, want)
		}
	}
	clk.Step(time.Second) // pays back the two reservations and refills the bucket
	if got := l.When("x"); got != 0 {
		t.Fatalf("after refill: When = %v", got)
	}
	if n := l.NumRequeues("x"); n != 0 {
		t.Fatalf("bucket NumRequeues = %d", n)
	}
}

func TestDefaultControllerLimiter(t *testing.T) {
	clk := clock.NewFake(epoch)
	l := DefaultControllerRateLimiter[int](clk)
	// Per item: 5 ms doubling.
	for i, want := range []time.Duration{5, 10, 20, 40} {
		if got := l.When(1); got != want*time.Millisecond {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want*time.Millisecond)
		}
	}
	l.Forget(1)
	// Overall: the bucket of 100 at 10 qps (4 tokens used above).
	for i := 2; i < 98; i++ {
		l.When(i)
	}
	if got := l.When(1000); got != 100*time.Millisecond {
		t.Fatalf("first call past the burst: When = %v, want 100ms", got)
	}
	// The per-item part caps at 1000 s.
	for range 40 {
		l.When(7)
	}
	if got := l.When(7); got != 1000*time.Second {
		t.Fatalf("capped When = %v", got)
	}
}

func TestRateLimitedQueue(t *testing.T) {
	clk := clock.NewFake(epoch)
	q := New(Options[string]{Clock: clk, RateLimiter: NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute)})
	defer q.ShutDown()
	q.AddRateLimited("a") // 1 s
	q.AddRateLimited("a") // 2 s, later: keeps 1 s
	q.AddRateLimited("b") // 1 s
	if n := q.NumRequeues("a"); n != 2 {
		t.Fatalf("NumRequeues = %d", n)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len before delay = %d", n)
	}
	clk.Step(time.Second)
	if n := q.Len(); n != 2 {
		t.Fatalf("Len after 1s = %d", n)
	}
	q.Forget("a")
	if n := q.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}

	q.AddWithOpts(AddOpts{RateLimited: true, After: 5 * time.Second}, "c") // later of 1 s and 5 s
	clk.Step(time.Second)
	if n := q.Len(); n != 2 {
		t.Fatalf("Len = %d: RateLimited with a longer After must wait for After", n)
	}
	clk.Step(4 * time.Second)
	if n := q.Len(); n != 3 {
		t.Fatalf("Len = %d", n)
	}
}
