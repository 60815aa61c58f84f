package episode

import (
	"time"

	"github.com/camproxy/camproxy/protocol"
)

// Turn is one finished call of an episode, as the data plane hands it to its
// recorders (the replay buffer, the dashboard's recent episodes). It lives here,
// beside the Episode it carries, so the data plane and the replay buffer share it
// without the data plane linking the replay buffer's stores.
type Turn struct {
	Episode    Episode            // the episode as it stands after this turn
	NewEpisode bool               // this call started the episode
	Index      int                // the turn's position in the episode, from 0
	Messages   []protocol.Message // messages new since the episode's previous turn
	Response   protocol.Message   // the answer; empty when the call failed
	// AnswerTruncated is how many bytes of the answer Response lacks: it was cut at
	// replay.max_answer_bytes (the agent got it whole). 0 when Response is whole.
	AnswerTruncated int64
	Usage           protocol.Usage
	Status          int    // HTTP status relayed to the agent (499: the agent went away)
	Error           string // why the call failed, if it did
	Augment         time.Duration
	TTFB            time.Duration
	Total           time.Duration
	At              time.Time
	// Transport is how the call arrived: TransportHTTP or TransportWebSocket (a
	// response.create on a Responses API socket); "" is HTTP.
	Transport string
}

// Transports a turn arrives by.
const (
	TransportHTTP      = "http"
	TransportWebSocket = "websocket"
)
