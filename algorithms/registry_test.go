package algorithms

import (
	"time"

	"errors"
	"testing"
)

// TestRowsAreComplete checks every built-in row as register checks a new
// one: every field set, Accuracy stated, name, suffix and salt its own;
// and that Lookup finds each by a name that shares no memory with it.
func TestRowsAreComplete(t *testing.T) {
	for _, a := range registry {
		if err := check(a, registry); err != nil {
			t.Error(err)
		}
		if got := Lookup(Name([]byte(a.Name))); got != a {
			t.Errorf("Lookup(%q) = %v, want its row", a.Name, got)
		}
	}
	for _, name := range []Name{"", "leaky_bucket", "sliding_logs", Name(make([]byte, 40))} {
		if a := Lookup(name); a != nil {
			t.Errorf("Lookup(%q) = %s, want nil", name, a.Name)
		}
	}
}

// TestCheckCatchesAnIncompleteRow is the control: rows that lack their
// promise, share a built-in's name, or have too long a name are refused,
// and one lease step without the other too.
func TestCheckCatchesAnIncompleteRow(t *testing.T) {
	rows := map[string]func(*Algorithm){
		"no Accuracy":     func(a *Algorithm) { a.Accuracy = 0 },
		"a built-in name": func(a *Algorithm) { a.Name = SlidingLog },
		"a long name":     func(a *Algorithm) { a.Name = "a_name_longer_than_thirty_two_bytes" },
		"a lease half":    func(a *Algorithm) { a.Release = concurrency.Release },
		"a lease approx":  func(a *Algorithm) { a.Release, a.Renew = concurrency.Release, concurrency.Renew },
	}
	for what, bend := range rows {
		a := gcra
		a.Name, a.Suffix, a.Salt = "leaky_bucket", ":lb", 1
		if err := check(&a, registry); err != nil {
			t.Fatalf("the unbent row: %v", err)
		}
		bend(&a)
		if err := check(&a, registry); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%s: check = %v, want ErrInvalidRule", what, err)
		}
	}
}

// TestCountedUntil: after a take, every algorithm's key is back to its
// full limit at Rule.CountedUntil (what the fallback store's baselines
// wait for), and a fixed window's not a ms before (the control: the bound
// is not merely late).
func TestCountedUntil(t *testing.T) {
	const now = 1_700_000_003_700 // inside a 10 s window
	for _, a := range registry {
		r := Rule{Algorithm: a.Name, Limit: 5, Window: 10 * sec}
		var s State
		if out := r.Take(&s, now, 3); !out.Allowed {
			t.Fatalf("%s: the take was refused", a.Name)
		}
		until := r.CountedUntil(now)
		if out := r.Peek(&s, until, 1); out.Remaining != r.Limit {
			t.Errorf("%s: at CountedUntil (+%d ms) %d left, want the limit %d", a.Name, until-now, out.Remaining, r.Limit)
		}
		if a.Name == FixedWindow {
			if out := r.Peek(&s, until-1, 1); out.Remaining == r.Limit {
				t.Errorf("%s: a ms before CountedUntil the key is already full: the bound is late", a.Name)
			}
		}
	}
}

// TestLookupFindsRows: the table finds every row and nothing else, and a
// resolved rule carries its row (no lookup by name when it decides).
func TestLookupFindsRows(t *testing.T) {
	for _, a := range registry {
		if got := Lookup(Name([]byte(a.Name))); got != a {
			t.Errorf("Lookup(%q) = %v, want its row", a.Name, got)
		}
		r, err := NewRule(a.Name, 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Descriptor(); got != a || !r.Resolved() {
			t.Errorf("resolved %s: Descriptor %v, Resolved %v; want its row, true", a.Name, got, r.Resolved())
		}
	}
	if a := Lookup("leaky_bucket"); a != nil {
		t.Errorf("Lookup(leaky_bucket) = %s, want nil", a.Name)
	}
}

func BenchmarkLookup(b *testing.B) {
	for _, a := range registry {
		name := Name([]byte(a.Name)) // as a config file gives it
		b.Run(string(a.Name), func(b *testing.B) {
			for b.Loop() {
				if Lookup(name) != a {
					b.Fatal("not found")
				}
			}
		})
	}
}
