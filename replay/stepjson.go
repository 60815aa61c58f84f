package replay

import (
	"math"
	"strconv"
	"time"

	"github.com/camproxy/camproxy/protocol"
)

// appendStep appends the JSON line of a step event, as json.Marshal writes it but
// for HTML characters, which stay as they are. Steps are most of the buffer's
// events; writing them directly spares encoding/json's validating copy of every
// message's MarshalJSON output, which doubled the recorder's cost per step.
func appendStep(b []byte, s *StepEvent) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(s.V), 10)
	b = append(b, `,"type":`...)
	b = protocol.AppendString(b, s.Type)
	b = append(b, `,"id":`...)
	b = protocol.AppendString(b, s.ID)
	b = append(b, `,"episode_id":`...)
	b = protocol.AppendString(b, s.EpisodeID)
	if s.Experiment != "" {
		b = append(b, `,"experiment":`...)
		b = protocol.AppendString(b, s.Experiment)
	}
	b = append(b, `,"turn":`...)
	b = strconv.AppendInt(b, int64(s.Turn), 10)
	b = append(b, `,"messages":`...)
	if s.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range s.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = s.Messages[i].AppendJSON(b)
		}
		b = append(b, ']')
	}
	if s.Response != nil {
		b = append(b, `,"response":`...)
		b = s.Response.AppendJSON(b)
	}
	if s.AnswerTruncatedBytes != 0 {
		b = append(b, `,"answer_truncated_bytes":`...)
		b = strconv.AppendInt(b, s.AnswerTruncatedBytes, 10)
	}
	b = append(b, `,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, s.Usage.InputTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, s.Usage.OutputTokens, 10)
	b = append(b, `},"timing_ms":{"augment":`...)
	b = appendFloat(b, s.Timing.Augment)
	b = append(b, `,"upstream_ttfb":`...)
	b = appendFloat(b, s.Timing.UpstreamTTFB)
	b = append(b, `,"total":`...)
	b = appendFloat(b, s.Timing.Total)
	b = append(b, `},"status":`...)
	b = strconv.AppendInt(b, int64(s.Status), 10)
	if s.Error != "" {
		b = append(b, `,"error":`...)
		b = protocol.AppendString(b, s.Error)
	}
	b = append(b, `,"at":"`...)
	b = s.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if s.Transport != "" {
		b = append(b, `,"transport":`...)
		b = protocol.AppendString(b, s.Transport)
	}
	return append(b, '}')
}

// stepSize is about how long appendStep's line for s is: the buffer it is written
// into is allocated once, at this size, rather than grown from a guess (doubling a
// turn's line from 512 bytes to its system prompt's 10 KB was most of its cost).
func stepSize(s *StepEvent) int {
	n := 512 + len(s.ID) + len(s.EpisodeID) + len(s.Experiment) + len(s.Error)
	for i := range s.Messages {
		n += 1 + s.Messages[i].JSONSize()
	}
	if s.Response != nil {
		n += 12 + s.Response.JSONSize()
	}
	return n
}

// appendFloat writes f as encoding/json does (NaN and infinities, which JSON cannot
// hold, as 0).
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
