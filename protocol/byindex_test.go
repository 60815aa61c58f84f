package protocol

import "testing"

type indexedItem struct {
	i int64
	s string
}

func (x indexedItem) Index() int64 { return x.i }

// TestByIndex: items are found by their index before and after the map takes
// over from the scan, stay where Add put them, and come sorted by index.
func TestByIndex(t *testing.T) {
	var b ByIndex[indexedItem]
	if b.Get(0) != nil || b.Len() != 0 || len(b.Sorted()) != 0 {
		t.Fatal("the zero value is not empty")
	}
	// Indexes as a stream may send them: out of order, sparse, huge, negative.
	idx := []int64{5, 1, 1 << 40, -3, 0, 7, 2, 9, 4, 100, 6}
	for n, i := range idx {
		if b.Get(i) != nil {
			t.Fatalf("%d found before it was added", i)
		}
		b.Add(indexedItem{i: i}).s = "x"
		if b.Len() != n+1 {
			t.Fatalf("Len = %d after %d adds", b.Len(), n+1)
		}
		for _, j := range idx[:n+1] {
			if got := b.Get(j); got == nil || got.i != j || got.s != "x" {
				t.Fatalf("after %d adds, Get(%d) = %+v", n+1, j, got)
			}
		}
		if b.Get(3) != nil {
			t.Fatalf("after %d adds, Get(3) found an item", n+1)
		}
	}
	b.Get(2).s = "y"
	sorted := b.Sorted()
	for k := 1; k < len(sorted); k++ {
		if sorted[k-1].i >= sorted[k].i {
			t.Fatalf("Sorted is not in index order: %+v", sorted)
		}
	}
	sorted[0].s = "changed"
	if b.Get(2).s != "y" || b.Get(-3).s != "x" {
		t.Fatal("Sorted did not return a copy, or Get lost a change")
	}
}
