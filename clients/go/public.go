package idmint

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
)

// Public IDs (docs/public-ids.md): WithFormat(PublicFormat) on IDs, NewID and Stream, NextPublic on a sequence,
// Reveal and RevealMany to read them back. A public ID is a keyed mask of an internal ID: it keeps no order and is
// no integer, so its answers are checked against the form's token pattern (GET /v1/schemes' token_patterns
// "public") and for repeats (within the answer and against the recent IDs of the same scheme and options), never
// for rising order; a sequence's public texts for their shape and against the recent texts of the sequence, never
// as integers or intervals.

// PublicFormat is the text form of public IDs: WithFormat(PublicFormat).
const PublicFormat = "public"

// maxRevealTexts is the most texts one POST /v1/public reads: RevealMany splits above it.
const maxRevealTexts = 10_000

// publicSequenceText is a sequence integer's public text: 17 Crockford base32 characters, then the key id (1..F).
var publicSequenceText = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{17}[1-9A-F]$`)

// Revealed is a public ID read back (GET /v1/public/{text}, an item of POST /v1/public): ID is the internal ID in
// its scheme's canonical form (a sequence integer's decimal digits), Scheme its scheme or "sequence", KeyID the
// key (1..15) that opened it, Decoded its decode reading (nil for a sequence integer). In RevealMany's answer, an
// item no key in force opens has only Text and Error (why); Error is "" for an opened one.
type Revealed struct {
	Text    string
	ID      string
	Scheme  string
	KeyID   int
	Decoded *Decoded
	Error   string
}

type revealedJSON struct {
	ID      *string          `json:"id"`
	Scheme  *string          `json:"scheme"`
	KeyID   *json.Number     `json:"key_id"`
	Decoded *json.RawMessage `json:"decoded"`
	Error   *string          `json:"error"`
}

// revealed is one item of a reveal answer for text; a failure when it is not what the API promises (an item with
// an error only where errors are allowed).
func (r revealedJSON) revealed(text string, errorAllowed bool) (Revealed, error) {
	shownText := shown(text)
	if r.Error != nil && errorAllowed {
		return Revealed{Text: text, Error: *r.Error}, nil
	}
	if r.ID == nil || r.Scheme == nil || *r.ID == "" || *r.Scheme == "" {
		return Revealed{}, failf("reveal answer for %s has no id and scheme", shownText)
	}
	keyID := 0
	if r.KeyID != nil {
		if v, err := strconv.Atoi(r.KeyID.String()); err == nil {
			keyID = v
		}
	}
	if keyID < 1 || keyID > 15 {
		return Revealed{}, failf("reveal answer for %s has key_id %v, not 1..15", shownText, r.KeyID)
	}
	out := Revealed{Text: text, ID: *r.ID, Scheme: *r.Scheme, KeyID: keyID}
	if r.Decoded != nil && string(*r.Decoded) != "null" {
		var reading decodedJSON
		if err := json.Unmarshal(*r.Decoded, &reading); err != nil {
			return Revealed{}, failf("reveal answer for %s has an unreadable decoded reading: %v", shownText, err)
		}
		d := reading.decoded()
		out.Decoded = &d
	}
	return out, nil
}

// Reveal reads public ID text back (GET /v1/public/{text}): the internal ID, its scheme, the key that opened it
// and its decode reading. Errors: *UnknownPublicIDError (404: no key in force opens it), *ValidationError (the
// server has no public-ID keys), *UnauthorizedError or *ForbiddenError (no decode scope), *NoReplicaAvailableError.
func (c *Client) Reveal(ctx context.Context, text string) (*Revealed, error) {
	return call(ctx, c, request{method: "GET", path: "/v1/public/" + url.PathEscape(text), scope: allScopes,
		what: fmt.Sprintf("reveal %s", shown(text)), advance: true, publicIDs: true},
		func(resp *http.Response) (*Revealed, error) {
			var answer revealedJSON
			decoder := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes))
			decoder.UseNumber()
			if err := decoder.Decode(&answer); err != nil {
				return nil, failf("unreadable reveal answer: %v", err)
			}
			out, err := answer.revealed(text, false)
			if err != nil {
				return nil, err
			}
			return &out, nil
		})
}

// RevealMany reads every text of texts back (POST /v1/public, 10,000 texts a request): one item per text, in
// order; an item no key in force opens has its Error set. Errors: *ValidationError (no public-ID keys),
// *UnauthorizedError, *NoReplicaAvailableError.
func (c *Client) RevealMany(ctx context.Context, texts []string) ([]Revealed, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	out := make([]Revealed, 0, len(texts))
	for start := 0; start < len(texts); start += maxRevealTexts {
		end := start + maxRevealTexts
		if end > len(texts) {
			end = len(texts)
		}
		part := texts[start:end]
		body, err := json.Marshal(map[string][]string{"texts": part})
		if err != nil {
			return nil, err
		}
		items, err := call(ctx, c, request{method: "POST", path: "/v1/public", scope: allScopes, body: body,
			what: fmt.Sprintf("reveal %d public IDs", len(part)), advance: true},
			func(resp *http.Response) ([]Revealed, error) {
				var answer struct {
					Items []revealedJSON `json:"items"`
				}
				decoder := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes))
				decoder.UseNumber()
				if err := decoder.Decode(&answer); err != nil {
					return nil, failf("unreadable reveal answer: %v", err)
				}
				if len(answer.Items) != len(part) {
					return nil, failf("reveal answer holds %d items for %d texts", len(answer.Items), len(part))
				}
				got := make([]Revealed, len(part))
				for i, item := range answer.Items {
					one, err := item.revealed(part[i], true)
					if err != nil {
						return nil, err
					}
					got[i] = one
				}
				return got, nil
			})
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
	}
	return out, nil
}

// NextPublic returns the public texts of count integers of sequence name (GET /v1/sequences/{name}/next with
// format=public; docs/public-ids.md): 18 characters each, in no order; read them back with Reveal. No text is
// handed out twice (checked against the recent texts of the sequence). Errors as Next; *ValidationError when the
// server has no public-ID keys.
func (c *Client) NextPublic(ctx context.Context, name string, count int) ([]string, error) {
	return call(ctx, c, request{method: "GET", path: sequencePath(name, "next"), scope: sequenceScope + name,
		params: url.Values{"count": {strconv.Itoa(count)}, "format": {PublicFormat}}, advance: true,
		what: fmt.Sprintf("next %d of sequence %s", count, name)}, func(resp *http.Response) ([]string, error) {
		var answer struct {
			Name *string `json:"name"`
			IDs  []any   `json:"ids"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&answer); err != nil ||
			answer.Name == nil || answer.IDs == nil {
			return nil, failf("unreadable next answer: %v", err)
		}
		if *answer.Name != name || len(answer.IDs) != count {
			return nil, failf("next answer for %q holds %d public IDs; asked %d of %q", *answer.Name,
				len(answer.IDs), count, name)
		}
		texts := make([]string, count)
		for i, one := range answer.IDs {
			text, ok := one.(string)
			if !ok || !publicSequenceText.MatchString(text) {
				return nil, failf("public ID %d is not a sequence integer's public text: %s", i+1, shown(fmt.Sprint(one)))
			}
			texts[i] = text
		}
		if err := c.repeats.check(sequenceScope+name+"\x00"+PublicFormat, texts, "public ID", 1, rule{}, ""); err != nil {
			return nil, err
		}
		return texts, nil
	})
}
