package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// BatchPolicy lets a sink tell the recorder how to batch for it: a batch is written
// when it holds MaxEvents events or its oldest event has waited MaxWait.
type BatchPolicy struct {
	MaxEvents int
	MaxWait   time.Duration
}

// redisField is the stream entry field that holds the event line.
const redisField = "e"

// redisPage is how many entries one XRANGE call of a scan fetches.
const redisPage = 1000

// RedisSink appends events to a Redis Stream, the shared buffer of a fleet of
// sidecars: one entry per event, field "e" holding the JSON line.
type RedisSink struct {
	rdb    redis.UniversalClient
	stream string
	maxLen int64
	owned  bool // Close closes rdb: the sink created it (OpenSink)
}

// NewRedisSink returns a sink that XADDs to stream. maxLen > 0 caps the stream at
// about that many entries (XADD MAXLEN ~ maxLen); 0 never trims. The caller keeps
// ownership of rdb: Close does not close it.
func NewRedisSink(rdb redis.UniversalClient, stream string, maxLen int64) *RedisSink {
	return &RedisSink{rdb: rdb, stream: stream, maxLen: max(maxLen, 0)}
}

// Name is the sink's metric label.
func (s *RedisSink) Name() string { return "redis" }

// BatchPolicy: one pipeline round trip per 512 events, or every 50ms.
func (s *RedisSink) BatchPolicy() BatchPolicy {
	return BatchPolicy{MaxEvents: 512, MaxWait: 50 * time.Millisecond}
}

// Write sends the batch as one pipeline of XADDs. Any failed XADD fails the whole
// write; the recorder then retries the batch, so some entries may be stored twice
// (readers drop duplicates by event id).
func (s *RedisSink) Write(ctx context.Context, lines [][]byte) error {
	if len(lines) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, line := range lines {
		pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: s.stream,
			MaxLen: s.maxLen,
			Approx: s.maxLen > 0,
			Values: []any{redisField, line},
		})
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return fmt.Errorf("redis stream %s: xadd: %w", s.stream, err)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return fmt.Errorf("redis stream %s: xadd: %w", s.stream, err)
		}
	}
	return nil
}

// Close closes the client if the sink created it.
func (s *RedisSink) Close() error {
	if s.owned {
		return s.rdb.Close()
	}
	return nil
}

// RedisSource reads back a Redis Stream written by RedisSink, oldest entry first.
type RedisSource struct {
	rdb    redis.UniversalClient
	stream string
	owned  bool
}

// NewRedisSource returns a source over stream. The caller keeps ownership of rdb.
func NewRedisSource(rdb redis.UniversalClient, stream string) *RedisSource {
	return &RedisSource{rdb: rdb, stream: stream}
}

// Scan calls fn with every entry's line in stream order, reading XRANGE pages of
// 1000 entries. Entries added while the scan runs may or may not be seen. An entry
// without the "e" field is an error naming its id.
func (s *RedisSource) Scan(ctx context.Context, fn func(line []byte) error) error {
	start := "-"
	for {
		msgs, err := s.rdb.XRangeN(ctx, s.stream, start, "+", redisPage).Result()
		if err != nil {
			return fmt.Errorf("redis stream %s: xrange: %w", s.stream, err)
		}
		for _, m := range msgs {
			v, ok := m.Values[redisField]
			if !ok {
				return fmt.Errorf("redis stream %s: entry %s has no field %q", s.stream, m.ID, redisField)
			}
			var line []byte
			switch v := v.(type) {
			case string:
				line = []byte(v)
			case []byte:
				line = v
			default:
				return fmt.Errorf("redis stream %s: entry %s: field %q is a %T", s.stream, m.ID, redisField, v)
			}
			if err := fn(line); err != nil {
				return err
			}
		}
		if len(msgs) < redisPage {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// Close closes the client if the source created it (OpenSource); otherwise it does
// nothing.
func (s *RedisSource) Close() error {
	if s.owned {
		return s.rdb.Close()
	}
	return nil
}
