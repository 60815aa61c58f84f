package bedrock

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/camproxy/camproxy/protocol"
)

const (
	// maxFrame is the longest frame the event stream format allows (16 MiB): a
	// longer length is corrupt, and stops a reader. It bounds a JSON answer too.
	maxFrame = 16 << 20
	// minFrame is the length of a frame with no headers and no payload: the prelude
	// (total length, headers length, prelude CRC) and the message CRC.
	minFrame = 16
	// prelude is the length of a frame's prelude; its CRC vouches for the lengths.
	prelude = 12
	// keepBuf is the largest buffer kept for reuse after a frame: one huge frame
	// should not pin its buffer for the rest of a long stream.
	keepBuf = 64 << 10
	// frameHeaders bounds what a frame adds to its event: the prelude, the headers
	// (":event-type", ":content-type", ":message-type" and short values) and the CRC.
	frameHeaders = 4 << 10
)

// frameBound is the frame a stream decoder holding an answer to limit bytes reads
// whole: an event of protocol.EventBound(limit) bytes, base64-encoded as InvokeModel
// streams carry the model's events (4/3), plus the frame's headers; at most maxFrame.
func frameBound(limit int) int {
	e := protocol.EventBound(limit)
	if e >= maxFrame {
		return maxFrame
	}
	return min(e/3*4+4+frameHeaders, maxFrame)
}

// FrameReader splits an AWS event stream (application/vnd.amazon.eventstream) fed
// in arbitrary chunks into frames, and decodes each with the SDK's eventstream
// decoder, CRCs checked. A frame is a 4-byte big-endian total length, then the rest.
// A frame longer than Max is skipped unread once its prelude's CRC vouches for its
// length, and handed to Skipped; one longer than 16 MiB (the format's limit), shorter
// than the minimum or that does not decode stops the reader: the rest of the stream
// is ignored.
//
// The zero value discards frames; set Frame to see them. It is not safe for
// concurrent use.
type FrameReader struct {
	// Frame is called with every complete frame, in order. The message (its payload
	// and header values) is valid only during the call.
	Frame func(msg eventstream.Message)
	// Skipped, if set, is told the length of each frame longer than Max, in order
	// with the frames.
	Skipped func(n int)
	// Max bounds the frame the reader holds; 0 is frameBound of the default answer
	// budget.
	Max int

	buf     []byte // the frame that earlier writes began
	payload []byte // reused for the payload of each frame
	skip    int    // bytes of a skipped frame still to come
	rd      bytes.Reader
	dec     eventstream.Decoder
	broken  bool
}

// Write feeds the next bytes of the stream. It never fails.
func (f *FrameReader) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !f.broken {
		if f.skip > 0 {
			k := min(f.skip, len(p))
			f.skip -= k
			p = p[k:]
			continue
		}
		if len(f.buf) == 0 && len(p) >= prelude {
			// Frames that lie whole in p are decoded in place.
			l, ok := f.frameLen(p)
			switch {
			case !ok:
			case l > f.max():
				f.skipFrame(p, l)
			case len(p) < l:
				f.buf = append(f.buf, p...)
				p = nil
			default:
				f.decode(p[:l])
				p = p[l:]
			}
			continue
		}
		if len(f.buf) < prelude {
			k := min(prelude-len(f.buf), len(p))
			f.buf = append(f.buf, p[:k]...)
			p = p[k:]
			if len(f.buf) < 4 {
				break
			}
			l, ok := f.frameLen(f.buf) // a bad length stops the reader before its prelude is whole
			if !ok || len(f.buf) < prelude {
				break
			}
			if l > f.max() {
				f.skipFrame(f.buf, l)
				f.skip = max(f.skip-prelude, 0) // the prelude was read
				f.buf = f.buf[:0]
				continue
			}
		}
		l := int(binary.BigEndian.Uint32(f.buf))
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

// max is the bound on the frame the reader holds.
func (f *FrameReader) max() int {
	if f.Max > 0 {
		return f.Max
	}
	return frameBound(0)
}

// skipFrame starts skipping the frame of length l whose prelude starts p: the
// prelude's CRC must vouch for the length, else the stream is corrupt and the reader
// stops.
func (f *FrameReader) skipFrame(p []byte, l int) {
	if crc32.ChecksumIEEE(p[:8]) != binary.BigEndian.Uint32(p[8:prelude]) {
		f.stop()
		return
	}
	f.skip = l
	if f.Skipped != nil {
		f.Skipped(l)
	}
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
