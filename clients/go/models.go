package idmint

import (
	"encoding/json"
	"time"
)

// Decoded is one ID read as one scheme (GET /v1/decode/{scheme}/{id}): ID is the canonical text form, Hex the
// packed bytes in lowercase hex, Timestamp the creation time (zero when the scheme has no time; TimestampText is
// the server's RFC 3339 text), Fields the scheme's own fields by name (see /v1/schemes).
type Decoded struct {
	Scheme        string
	ID            string
	Hex           string
	Timestamp     time.Time
	TimestampText string
	Fields        map[string]any
}

// Candidates is every scheme whose parser accepts Input (GET /v1/decode/{id}), the plausible readings first.
type Candidates struct {
	Input      string
	Candidates []Decoded
}

// Best is the first (most plausible) reading.
func (c *Candidates) Best() Decoded { return c.Candidates[0] }

// SchemeInfo is one scheme of GET /v1/schemes: its text forms (the first canonical), the largest count of one
// batch and one stream request, what the answering replica holds (Node), each form's token pattern, and the whole
// JSON entry (Raw).
type SchemeInfo struct {
	Name            string
	Formats         []string
	CanonicalFormat string
	MaxCount        int
	MaxStreamCount  int64
	Node            map[string]any
	TokenPatterns   map[string]string
	Raw             json.RawMessage
}

// SequenceRange is a contiguous range reserved for the caller (POST /v1/sequences/{name}/range): First..Last
// inclusive.
type SequenceRange struct {
	Name  string
	First int64
	Last  int64
}

// Count is the number of integers in the range.
func (r SequenceRange) Count() int64 { return r.Last - r.First + 1 }

type decodedJSON struct {
	Scheme    string         `json:"scheme"`
	ID        string         `json:"id"`
	Hex       string         `json:"hex"`
	Timestamp *string        `json:"timestamp"`
	Fields    map[string]any `json:"fields"`
}

func (d decodedJSON) decoded() Decoded {
	out := Decoded{Scheme: d.Scheme, ID: d.ID, Hex: d.Hex, Fields: d.Fields}
	if d.Timestamp != nil {
		out.TimestampText = *d.Timestamp
		out.Timestamp, _ = time.Parse(time.RFC3339Nano, *d.Timestamp)
	}
	if out.Fields == nil {
		out.Fields = map[string]any{}
	}
	return out
}

type schemeJSON struct {
	Name            string            `json:"name"`
	Formats         []string          `json:"formats"`
	CanonicalFormat string            `json:"canonical_format"`
	TokenPatterns   map[string]string `json:"token_patterns"`
	MaxLengths      map[string]int    `json:"max_lengths"`
	Rising          json.RawMessage   `json:"rising"`
	PerIdentity     json.RawMessage   `json:"rising_per_identity"`
	Node            map[string]any    `json:"node"`
	Limits          struct {
		MaxCount       int   `json:"max_count"`
		MaxStreamCount int64 `json:"max_stream_count"`
	} `json:"limits"`
}
