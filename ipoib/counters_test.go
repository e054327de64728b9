package ipoib

import "testing"

// Every counter has its own name, and the list `stats` shows has each of
// them, in order, with its value: a counter added without a name, or two
// with one name, fails here.
func TestEveryCounterNamed(t *testing.T) {
	var c counters
	for k := range numCounters {
		c.add(k, uint64(k)+1)
	}
	seen := map[string]bool{}
	for k, got := range c.list() {
		name := counterNames[k]
		switch {
		case name == "":
			t.Errorf("counter %d has no name", k)
		case seen[name]:
			t.Errorf("two counters named %s", name)
		case got.Name != name || got.Value != uint64(k)+1:
			t.Errorf("list()[%d] = %+v, want %s = %d", k, got, name, k+1)
		}
		seen[name] = true
	}
}
