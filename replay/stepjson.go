package replay

import (
	"errors"
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
	if b, ok := appendMillis(b, f); ok {
		return b
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

// appendEpisode appends the JSON line of an episode event, byte for byte as
// json.Marshal writes it (HTML characters escaped, as episode lines always were).
// An episode opens every new episode; encoding/json's reflection over its thirteen
// fields cost as much as encoding a whole step. Its error is json.Marshal's: a start
// time RFC 3339 cannot hold.
func appendEpisode(b []byte, e *EpisodeEvent) ([]byte, error) {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(e.V), 10)
	b = append(b, `,"type":`...)
	b = protocol.AppendStringHTML(b, e.Type)
	b = append(b, `,"id":`...)
	b = protocol.AppendStringHTML(b, e.ID)
	b = append(b, `,"episode_id":`...)
	b = protocol.AppendStringHTML(b, e.EpisodeID)
	b = append(b, `,"task_id":`...)
	b = protocol.AppendStringHTML(b, e.TaskID)
	b = append(b, `,"task":`...)
	b = protocol.AppendStringHTML(b, e.Task)
	if e.Experiment != "" {
		b = append(b, `,"experiment":`...)
		b = protocol.AppendStringHTML(b, e.Experiment)
	}
	b = append(b, `,"arm":`...)
	b = protocol.AppendStringHTML(b, e.Arm)
	b = append(b, `,"context":`...)
	b = protocol.AppendStringHTML(b, e.Context)
	b = append(b, `,"context_source":`...)
	b = protocol.AppendStringHTML(b, e.ContextSource)
	b = append(b, `,"protocol":`...)
	b = protocol.AppendStringHTML(b, e.Protocol)
	b = append(b, `,"model":`...)
	b = protocol.AppendStringHTML(b, e.Model)
	b = append(b, `,"started_at":"`...)
	n := len(b)
	b = e.StartedAt.AppendFormat(b, time.RFC3339Nano)
	if !strictRFC3339(b[n:]) {
		return b, errNotRFC3339
	}
	return append(b, `"}`...), nil
}

// errNotRFC3339 is a time encoding/json refuses (Time.MarshalJSON).
var errNotRFC3339 = errors.New("replay: time outside RFC 3339 (year outside [0,9999] or zone hour outside [0,23])")

// strictRFC3339 reports whether t, a time as RFC3339Nano formats it, is one
// Time.MarshalJSON accepts: a four-digit year and a zone hour below 24.
func strictRFC3339(t []byte) bool {
	if len(t) < len("2006-01-02T15:04:05Z") || t[4] != '-' {
		return false
	}
	if t[len(t)-1] == 'Z' {
		return true
	}
	z := t[len(t)-len("+07:00"):]
	return (z[0] == '+' || z[0] == '-') && 10*(z[1]-'0')+(z[2]-'0') < 24
}

// appendMillis writes f as strconv's shortest 'f' format does when f is n/1000 for
// an integer n, 0 < |n| < 10¹⁵, as a step's timings are (ms: milliseconds to the
// microsecond), without strconv's general search for the shortest digits. The
// decimal n/1000 reads back as f (f is the double nearest it), and any other decimal
// that does is more than a thousandth away from n/1000 at this magnitude, so needs
// more digits: n/1000, trailing zeros trimmed, is the shortest. ok is false for
// any other f.
func appendMillis(b []byte, f float64) (_ []byte, ok bool) {
	k := math.Round(f * 1000)
	if k == 0 || k <= -1e15 || k >= 1e15 || k/1000 != f {
		return b, false
	}
	n := int64(k)
	if n < 0 {
		b = append(b, '-')
		n = -n
	}
	b = strconv.AppendInt(b, n/1000, 10)
	frac := n % 1000
	if frac == 0 {
		return b, true
	}
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	for b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	return b, true
}
