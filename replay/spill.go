package replay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The spill is where a streaming read keeps events until the scan has ended: only
// then is an episode known to be whole (a reward may come hours after its steps,
// from another writer). It is a Pebble store (github.com/cockroachdb/pebble/v2) in a
// private temporary directory, chosen over bbolt because a read is a burst of
// random-order inserts followed by one ordered scan: an LSM takes the inserts into
// a bounded memtable and writes sorted runs sequentially, where a B+tree would
// rewrite pages at random; and with the memtable large enough nothing reaches the
// disk at all, so a small buffer is read in memory by the same code.
//
// Keys sort events into what reassembly needs:
//
//	'g' len(episode) episode seq  → the event (seq: 8-byte big-endian scan order)
//	'l' seq                       → a learn event
//	'i' len(id) id seq            → the 'g'/'l' key of the event with that id
//
// so an episode's events are adjacent and in scan order, and the events sharing an
// id are adjacent with the first read first: dedup is one ordered pass over 'i'
// that deletes the later ones.
type spill struct {
	dir   string
	db    *pebble.DB
	batch *pebble.Batch
}

const (
	spillEpisode = 'g'
	spillLearn   = 'l'
	spillID      = 'i'

	// spillBatchBytes is how much a write batch gathers before it is applied.
	spillBatchBytes = 1 << 20
	// spillMinMemtable keeps a tiny bound workable (tests spill with it).
	spillMinMemtable = 64 << 10
)

// openSpill creates the store in a new directory under parent ("" = os.TempDir()).
// memory bounds what it holds in RAM: two memtables of a quarter each (one being
// flushed while the other fills) and an eighth of block cache.
func openSpill(parent string, memory int64) (*spill, error) {
	dir, err := os.MkdirTemp(parent, "camproxy-replay-spill-")
	if err != nil {
		return nil, fmt.Errorf("replay: spill directory: %w", err)
	}
	cache := pebble.NewCache(max(memory/8, 1<<20))
	defer cache.Unref() // the DB holds its own reference
	o := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                uint64(max(memory/4, spillMinMemtable)),
		MemTableStopWritesThreshold: 2,
		// Nothing needs to survive a crash: a failed read starts again from the
		// source. Compactions would rewrite every spilled byte to save a merge of
		// a few hundred sorted runs in the one scan that reads them, so there are
		// none, and L0 never stops writes waiting for one.
		DisableWAL:                  true,
		DisableAutomaticCompactions: true,
		L0CompactionThreshold:       1 << 30,
		L0CompactionFileThreshold:   1 << 30,
		L0StopWritesThreshold:       1 << 30,
		Logger:                      quietPebble{},
		FS:                          noSyncFS{vfs.Default},
	}
	db, err := pebble.Open(dir, o)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("replay: open spill in %s: %w", dir, err)
	}
	return &spill{dir: dir, db: db, batch: db.NewBatch()}, nil
}

// quietPebble keeps Pebble's informational lines out of a CLI's output; its
// errors come back as errors from the calls.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)              {}
func (quietPebble) Errorf(string, ...any)             {}
func (quietPebble) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// noSyncFS skips every fsync: the spill is thrown away after one read, so what a
// sync buys (surviving a crash) is worth nothing, and a dozen syncs made opening
// the store cost more than reading a small buffer.
type noSyncFS struct{ vfs.FS }

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error                { return nil }
func (noSyncFile) SyncData() error            { return nil }
func (noSyncFile) SyncTo(int64) (bool, error) { return true, nil }
func noSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSync(fs.FS.Create(name, c))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	return noSync(fs.FS.OpenReadWrite(name, c, o...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) { return noSync(fs.FS.OpenDir(name)) }

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSync(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (s *spill) set(k, v []byte) error {
	if err := s.batch.Set(k, v, nil); err != nil {
		return fmt.Errorf("replay: spill: %w", err)
	}
	return s.applyFull()
}

func (s *spill) delete(k []byte) error {
	if err := s.batch.Delete(k, nil); err != nil {
		return fmt.Errorf("replay: spill: %w", err)
	}
	return s.applyFull()
}

func (s *spill) applyFull() error {
	if s.batch.Len() < spillBatchBytes {
		return nil
	}
	return s.apply()
}

// apply writes the pending batch.
func (s *spill) apply() error {
	if s.batch.Empty() {
		return nil
	}
	if err := s.db.Apply(s.batch, pebble.NoSync); err != nil {
		return fmt.Errorf("replay: spill: %w", err)
	}
	s.batch.Reset()
	return nil
}

// scan visits every key with this prefix in order.
func (s *spill) scan(prefix byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return fmt.Errorf("replay: spill: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("replay: spill: %w", err)
	}
	return nil
}

// spilled is how many bytes went to disk (flushed sorted runs).
func (s *spill) spilled() int64 {
	return int64(s.db.Metrics().Levels[0].TableBytesFlushed)
}

// close drops the store and its directory.
func (s *spill) close() error {
	err := s.batch.Close()
	err = errors.Join(err, s.db.Close())
	if rerr := os.RemoveAll(s.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("replay: remove spill %s: %w", s.dir, rerr))
	}
	return err
}

// spillKey appends prefix, the length-prefixed name and the 8-byte seq to dst.
func spillKey(dst []byte, prefix byte, name string, seq uint64) []byte {
	dst = append(dst, prefix)
	if prefix != spillLearn {
		dst = binary.AppendUvarint(dst, uint64(len(name)))
		dst = append(dst, name...)
	}
	return binary.BigEndian.AppendUint64(dst, seq)
}

// spillName is the episode id (or event id) of a 'g' (or 'i') key.
func spillName(k []byte) string {
	n, w := binary.Uvarint(k[1:])
	return string(k[1+w : 1+w+int(n)])
}

// spillGroup is a key without its seq: what the events of one episode (or one id)
// share.
func spillGroup(k []byte) []byte { return k[:len(k)-8] }
