package bedrock

import (
	"bytes"
	"encoding/binary"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

const (
	// maxFrame bounds one event stream frame, and a JSON answer: past it a decoder
	// stops rather than let its memory grow without bound.
	maxFrame = 16 << 20
	// minFrame is the length of a frame with no headers and no payload: the prelude
	// (total length, headers length, prelude CRC) and the message CRC.
	minFrame = 16
	// keepBuf is the largest buffer kept for reuse after a frame: one huge frame
	// should not pin its buffer for the rest of a long stream.
	keepBuf = 64 << 10
)

// FrameReader splits an AWS event stream (application/vnd.amazon.eventstream) fed
// in arbitrary chunks into frames, and decodes each with the SDK's eventstream
// decoder, CRCs checked. A frame is a 4-byte big-endian total length, then the rest.
// A frame longer than 16 MiB, shorter than the minimum or that does not decode
// stops the reader: the rest of the stream is ignored.
//
// The zero value discards frames; set Frame to see them. It is not safe for
// concurrent use.
type FrameReader struct {
	// Frame is called with every complete frame, in order. The message (its payload
	// and header values) is valid only during the call.
	Frame func(msg eventstream.Message)

	buf     []byte // the frame that earlier writes began
	payload []byte // reused for the payload of each frame
	rd      bytes.Reader
	dec     eventstream.Decoder
	broken  bool
}

// Write feeds the next bytes of the stream. It never fails.
func (f *FrameReader) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !f.broken {
		if len(f.buf) == 0 {
			// Frames that lie whole in p are decoded in place.
			if len(p) < 4 {
				f.buf = append(f.buf, p...)
				break
			}
			l, ok := f.frameLen(p)
			if !ok {
				break
			}
			if len(p) < l {
				f.buf = append(f.buf, p...)
				break
			}
			f.decode(p[:l])
			p = p[l:]
			continue
		}
		if len(f.buf) < 4 {
			k := min(4-len(f.buf), len(p))
			f.buf = append(f.buf, p[:k]...)
			p = p[k:]
			if len(f.buf) < 4 {
				break
			}
		}
		l, ok := f.frameLen(f.buf)
		if !ok {
			break
		}
		k := min(l-len(f.buf), len(p))
		f.buf = append(f.buf, p[:k]...)
		p = p[k:]
		if len(f.buf) == l {
			f.decode(f.buf)
			f.buf = f.buf[:0]
			if cap(f.buf) > keepBuf {
				f.buf = nil
			}
		}
	}
	return n, nil
}

// Broken reports that the stream held a frame the reader could not decode: later
// frames were ignored.
func (f *FrameReader) Broken() bool { return f.broken }

// frameLen reads the total length that starts a frame; false (and the reader
// broken) when it is out of bounds.
func (f *FrameReader) frameLen(p []byte) (int, bool) {
	l := binary.BigEndian.Uint32(p)
	if l < minFrame || l > maxFrame {
		f.stop()
		return 0, false
	}
	return int(l), true
}

// decode decodes one whole frame and hands it to Frame.
func (f *FrameReader) decode(frame []byte) {
	f.rd.Reset(frame)
	msg, err := f.dec.Decode(&f.rd, f.payload[:0])
	if err != nil || f.rd.Len() != 0 {
		f.stop()
		return
	}
	if cap(msg.Payload) <= keepBuf {
		f.payload = msg.Payload[:0]
	}
	if f.Frame != nil {
		f.Frame(msg)
	}
}

// stop breaks the reader and lets its buffers go.
func (f *FrameReader) stop() {
	f.broken = true
	f.buf, f.payload = nil, nil
}

// header returns the value of a string header, or "".
func header(msg eventstream.Message, name string) string {
	if v, ok := msg.Headers.Get(name).(eventstream.StringValue); ok {
		return string(v)
	}
	return ""
}
