package cm

import (
	"fmt"
	"reflect"
	"testing"
)

// TestEveryCounterShown gives every field of EngineStats (each element of
// the by-kind and by-reason arrays) a value of its own and looks for each
// value in the engine's Counters, under a name of its own: a field
// without a counter tag would be counted and never shown. (ipoibcm checks
// the same of its manager's, which shows the engine's after its own.)
func TestEveryCounterShown(t *testing.T) {
	e := NewEngine(EngineConfig{})
	next := uint64(1)
	unseen := map[uint64]string{} // value → the field that holds it
	set := func(f reflect.Value, name string) {
		f.SetUint(next)
		unseen[next] = name
		next++
	}
	for _, stats := range []any{&e.Stats} {
		v := reflect.ValueOf(stats).Elem()
		for i := range v.NumField() {
			sf, f := v.Type().Field(i), v.Field(i)
			name := v.Type().Name() + "." + sf.Name
			if _, ok := sf.Tag.Lookup("counter"); !ok {
				t.Errorf("%s has no counter tag", name)
			}
			switch f.Kind() {
			case reflect.Uint64:
				set(f, name)
			case reflect.Array:
				for j := range f.Len() {
					set(f.Index(j), fmt.Sprintf("%s[%d]", name, j))
				}
			default:
				t.Fatalf("%s is a %v, not a count", name, f.Type())
			}
		}
	}
	names := map[string]bool{}
	for _, c := range e.Counters() {
		if names[c.Name] {
			t.Errorf("counter %s appears twice", c.Name)
		}
		names[c.Name] = true
		delete(unseen, c.Value)
	}
	for _, name := range unseen {
		t.Errorf("%s is counted but not in Counters", name)
	}
}
