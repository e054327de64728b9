package ipoibcm

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// TestEveryCounterShown gives every field of ManagerStats and EngineStats
// (each element of the by-kind and by-reason arrays) a value of its own
// and looks for each value in the manager's Counters, under a name of its
// own: a field without a counter tag would be counted and never shown.
func TestEveryCounterShown(t *testing.T) {
	var e *cm.Engine
	m, err := NewManager(ManagerConfig{
		Local: ib.LinkAddr{QPN: 0x48},
		Service: func(ev func(cm.Event)) (cm.Service, error) {
			e = cm.NewEngine(cm.EngineConfig{Event: ev})
			return e, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	unseen := map[uint64]string{} // value → the field that holds it
	set := func(f reflect.Value, name string) {
		f.SetUint(next)
		unseen[next] = name
		next++
	}
	for _, stats := range []any{&m.Stats, &e.Stats} {
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
	for _, c := range m.Counters() {
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
