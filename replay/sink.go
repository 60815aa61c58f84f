package replay

import "context"

// Sink stores encoded events (one JSON object per line, no trailing newline). Write
// is all or nothing from the caller's view: on error the whole batch is retried later,
// so a sink may see an event twice; readers drop duplicates by event id.
type Sink interface {
	Name() string // metric label: file, redis, s3
	Write(ctx context.Context, lines [][]byte) error
	Close() error
}

// Source reads back every event a sink holds, in no guaranteed order across writers.
// fn gets each line; the slice is only valid during the call.
type Source interface {
	Scan(ctx context.Context, fn func(line []byte) error) error
}
