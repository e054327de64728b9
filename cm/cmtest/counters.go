package cmtest

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// CounterOf returns the value of the counter called name, and whether cs
// has it.
func CounterOf(cs []ib.Counter, name string) (uint64, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// WantCounter fails the test (without stopping it) unless the counter
// called name reads want; a counter that is not shown reads 0.
func WantCounter(tb testing.TB, cs []ib.Counter, name string, want uint64) {
	tb.Helper()
	if v, ok := CounterOf(cs, name); v != want || (want != 0 && !ok) {
		tb.Errorf("counter %s = %d (shown %v), want %d", name, v, ok, want)
	}
}

// EveryCounterShown checks the counter convention of package cm's stats
// structs (cm.StatCounters): it gives every field of each of stats
// (pointers to the structs; each element of the by-kind and by-reason
// arrays) a value of its own and looks for each value in counters(),
// under a name of its own. A field without a counter tag would be counted
// and never shown; a field that is not a uint64 or an array of them
// fails the test at once.
func EveryCounterShown(tb testing.TB, counters func() []ib.Counter, stats ...any) {
	tb.Helper()
	next := uint64(1)
	unseen := map[uint64]string{} // value → the field that holds it
	set := func(f reflect.Value, name string) {
		f.SetUint(next)
		unseen[next] = name
		next++
	}
	for _, s := range stats {
		v := reflect.ValueOf(s).Elem()
		for i := range v.NumField() {
			sf, f := v.Type().Field(i), v.Field(i)
			name := v.Type().Name() + "." + sf.Name
			if _, ok := sf.Tag.Lookup("counter"); !ok {
				tb.Errorf("%s has no counter tag", name)
			}
			switch f.Kind() {
			case reflect.Uint64:
				set(f, name)
			case reflect.Array:
				for j := range f.Len() {
					set(f.Index(j), fmt.Sprintf("%s[%d]", name, j))
				}
			default:
				tb.Fatalf("%s is a %v, not a count", name, f.Type())
			}
		}
	}
	names := map[string]bool{}
	for _, c := range counters() {
		if names[c.Name] {
			tb.Errorf("counter %s appears twice", c.Name)
		}
		names[c.Name] = true
		delete(unseen, c.Value)
	}
	for _, name := range unseen {
		tb.Errorf("%s is counted but not in Counters", name)
	}
}
