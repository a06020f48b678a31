package registry

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
)

type entry struct {
	gen   int
	busy  bool
	ended bool
}

func TestRegistry(t *testing.T) {
	var r Registry[*entry]
	if _, ok := r.Lookup("a"); ok {
		t.Fatal("the zero registry has a value")
	}
	keepAll := func(*entry) bool { return true }
	a := r.Get("a", keepAll, func() *entry { return &entry{gen: 1} })
	if again := r.Get("a", keepAll, func() *entry { return &entry{gen: 2} }); again != a {
		t.Fatalf("Get with keep true replaced the value: %+v", again)
	}
	b := r.Get("a", func(*entry) bool { return false }, func() *entry { return &entry{gen: 3} })
	if b == a || b.gen != 3 {
		t.Fatalf("Get with keep false kept %+v", b)
	}
	if v, _ := r.Lookup("a"); v != b {
		t.Fatal("the replacement is not registered")
	}

	// Update may leave the map as it is.
	own := r.Update("a", func(cur *entry, ok bool) (*entry, bool) {
		if !ok || cur != b {
			t.Errorf("Update saw %+v, %v", cur, ok)
		}
		return &entry{gen: 4}, false
	})
	if v, _ := r.Lookup("a"); v != b || own.gen != 4 {
		t.Fatalf("an unregistered Update changed the map: %+v", v)
	}
	r.Update("c", func(_ *entry, ok bool) (*entry, bool) { return &entry{busy: true}, !ok })
	r.Get("b", keepAll, func() *entry { return &entry{} })
	if got := r.Names(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names: %v", got)
	}
	var each []string
	r.Each(func(n string, _ *entry) { each = append(each, n) })
	if !reflect.DeepEqual(each, []string{"a", "b", "c"}) {
		t.Fatalf("Each: %v", each)
	}

	// Sweep: b is named, c is busy, a goes (and is told).
	var forgotten []*entry
	r.Sweep(map[string]bool{"b": true}, func(e *entry) bool { return !e.busy }, func(e *entry) {
		e.ended = true
		forgotten = append(forgotten, e)
	})
	if got := r.Names(); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Fatalf("after Sweep: %v", got)
	}
	if len(forgotten) != 1 || forgotten[0] != b || !b.ended {
		t.Fatalf("forgotten: %+v", forgotten)
	}
	r.Sweep(nil, func(*entry) bool { return true }, nil)
	if n := r.Names(); len(n) != 0 {
		t.Fatalf("a full sweep left %v", n)
	}
}

// One value per name under concurrent Gets.
func TestRegistryConcurrentGet(t *testing.T) {
	var r Registry[*entry]
	var wg sync.WaitGroup
	got := make([]*entry, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = r.Get("x", func(*entry) bool { return true }, func() *entry { return &entry{} })
		}()
	}
	wg.Wait()
	for _, e := range got {
		if e != got[0] {
			t.Fatal("two values for one name")
		}
	}
}

// All ranges over every value once, in no particular order, stops when the
// range does, and sees what was registered when the range started.
func TestAll(t *testing.T) {
	var r Registry[int]
	for i := range 100 {
		r.Update(fmt.Sprint("m", i), func(int, bool) (int, bool) { return i, true })
	}
	got := map[string]int{}
	for n, v := range r.All() {
		got[n] = v
	}
	if len(got) != 100 || got["m7"] != 7 || got["m99"] != 99 {
		t.Fatalf("All gave %d values (m7=%d, m99=%d), want 100", len(got), got["m7"], got["m99"])
	}
	n := 0
	for range r.All() {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("the range went on after break: %d", n)
	}
	all := r.All()
	r.Update("late", func(int, bool) (int, bool) { return -1, true })
	late := false
	for n := range all {
		late = late || n == "late"
	}
	if !late {
		t.Fatal("a range started after a registration does not see it")
	}
}
