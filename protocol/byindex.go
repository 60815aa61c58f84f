package protocol

import (
	"cmp"
	"slices"
)

// byIndexScan is the number of items past which ByIndex finds them by a map.
const byIndexScan = 8

// Indexed is an item a stream places by an index of its own (a content block, a
// tool call).
type Indexed interface{ Index() int64 }

// ByIndex holds what a stream decoder assembles per index, in arrival order. The
// indexes come from the stream, so they key a search, not a slice that one bad
// chunk could make huge; past a handful of items a map keeps the search linear in
// the stream. The zero value is empty and ready to use.
type ByIndex[T Indexed] struct {
	items []T
	at    map[int64]int // index → position in items, once there are many
}

// Get returns the item of index; nil when there is none.
func (b *ByIndex[T]) Get(index int64) *T {
	if b.at != nil {
		if i, ok := b.at[index]; ok {
			return &b.items[i]
		}
		return nil
	}
	for i := range b.items {
		if b.items[i].Index() == index {
			return &b.items[i]
		}
	}
	return nil
}

// Add appends v, whose index Get found no item for, and returns it. Pointers
// returned before may no longer point into b.
func (b *ByIndex[T]) Add(v T) *T {
	b.items = append(b.items, v)
	switch {
	case b.at != nil:
		b.at[v.Index()] = len(b.items) - 1
	case len(b.items) > byIndexScan:
		b.at = make(map[int64]int, 2*len(b.items))
		for i := range b.items {
			b.at[b.items[i].Index()] = i
		}
	}
	return &b.items[len(b.items)-1]
}

// Len is the number of items.
func (b *ByIndex[T]) Len() int { return len(b.items) }

// Sorted returns a copy of the items in index order: the stream may go on adding
// to b.
func (b *ByIndex[T]) Sorted() []T {
	s := slices.Clone(b.items)
	slices.SortFunc(s, func(x, y T) int { return cmp.Compare(x.Index(), y.Index()) })
	return s
}
