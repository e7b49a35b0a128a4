package clock

import (
	"testing"
	"time"
)

func TestFakeTimerFiresOnlyWhenStepped(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	select {
	case <-tm.C():
		t.Fatal("timer fired before its time")
	default:
	}
	f.Step(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("timer fired early")
	default:
	}
	f.Step(time.Millisecond)
	select {
	case got := <-tm.C():
		if !got.Equal(time.Unix(1, 0)) {
			t.Fatalf("fired with %v", got)
		}
	default:
		t.Fatal("timer did not fire at its deadline")
	}
	if f.HasWaiters() {
		t.Fatal("a fired timer is still waiting")
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it active")
	}
}

func TestFakeTickerAndReset(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(time.Second)
	for i := 0; i < 3; i++ {
		f.Step(time.Second)
		select {
		case <-tk.C():
		default:
			t.Fatalf("tick %d missing", i)
		}
	}
	tk.Stop()
	f.Step(time.Second)
	select {
	case <-tk.C():
		t.Fatal("stopped ticker ticked")
	default:
	}
	tm := f.NewTimer(time.Hour)
	if !tm.Reset(time.Second) {
		t.Fatal("Reset of an active timer reported it inactive")
	}
	f.Step(time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("reset timer did not fire")
	}
	if f.Waiters() != 0 {
		t.Fatalf("waiters = %d", f.Waiters())
	}
}

func TestOrDefaultsToReal(t *testing.T) {
	if _, ok := Or(nil).(Real); !ok {
		t.Fatal("Or(nil) is not the real clock")
	}
	f := NewFake(time.Unix(5, 0))
	if Or(f) != Clock(f) {
		t.Fatal("Or replaced a given clock")
	}
}
