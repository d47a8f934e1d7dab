package idmint

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Failover rules (the same in every idmint client): replicas are tried round-robin (call n starts at replica
// n mod N); a 503 or 429 moves on and keeps the refusing replica out of that scope (scheme or sequence) for its
// Retry-After; a connection error or a failed answer moves on and keeps the replica out of every scope for
// failedBackoff, but such a replica is still tried, last, when nothing else is left. A 4xx other than 429 is the
// request's fault: returned at once, never asked of another replica.

const (
	failedBackoff     = time.Second
	defaultRetryAfter = 1.0
	// maxRetryAfter is the longest a Retry-After keeps a replica out, in seconds (a larger value, or a later date,
	// is capped to this).
	maxRetryAfter  = 300.0
	allScopes      = ""
	sequenceScope  = "sequence:"
	maxDetailChars = 200
)

var countRangeRE = regexp.MustCompile(`count must be (?:an integer )?in 1\.\.(\d+)`)

type mark struct {
	until    time.Time
	reason   string
	honoured bool
}

type replicaSet struct {
	urls []string
	turn atomic.Uint64
	mu   sync.Mutex
	out  map[[2]string]mark
}

func newReplicaSet(urls []string) *replicaSet {
	return &replicaSet{urls: urls, out: map[[2]string]mark{}}
}

// plan gives the replicas to try for scope, in order, and the ones skipped because a server asked to wait.
// advance=false starts where the next call will (a catalogue fetched on the way leaves the turn to the call).
func (r *replicaSet) plan(scope string, advance bool) ([]string, map[string]string) {
	var start uint64
	if advance {
		start = r.turn.Add(1) - 1
	} else {
		start = r.turn.Load()
	}
	n := uint64(len(r.urls))
	now := time.Now()
	var ready, guessed []string
	skipped := map[string]string{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := uint64(0); i < n; i++ {
		url := r.urls[(start+i)%n]
		var live []mark
		for _, key := range [][2]string{{url, allScopes}, {url, scope}} {
			if m, ok := r.out[key]; ok && m.until.After(now) {
				live = append(live, m)
			}
		}
		var honoured *mark
		for i := range live {
			if live[i].honoured && (honoured == nil || live[i].until.After(honoured.until)) {
				honoured = &live[i]
			}
		}
		switch {
		case len(live) == 0:
			ready = append(ready, url)
		case honoured != nil:
			skipped[url] = fmt.Sprintf("%s; kept out for %.1f s more", honoured.reason, honoured.until.Sub(now).Seconds())
		default:
			guessed = append(guessed, url)
		}
	}
	return append(ready, guessed...), skipped
}

func (r *replicaSet) refused(url, scope string, e *refused) {
	r.mu.Lock()
	r.out[[2]string{url, scope}] = mark{time.Now().Add(seconds(e.retryAfter)), e.reason, true}
	r.mu.Unlock()
}

func (r *replicaSet) failed(url, reason string) {
	r.mu.Lock()
	r.out[[2]string{url, allScopes}] = mark{time.Now().Add(failedBackoff), reason, false}
	r.mu.Unlock()
}

func (r *replicaSet) succeeded(url, scope string) {
	r.mu.Lock()
	if len(r.out) > 0 {
		delete(r.out, [2]string{url, allScopes})
		delete(r.out, [2]string{url, scope})
	}
	r.mu.Unlock()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// detailOf is the server's "detail" text (idmint answers errors as {"detail": ...}), else the body's start.
func detailOf(body []byte, status string) string {
	var data map[string]any
	if json.Unmarshal(body, &data) == nil {
		if detail, ok := data["detail"]; ok {
			if text, ok := detail.(string); ok {
				return text
			}
			shown, _ := json.Marshal(detail)
			return string(shown)
		}
	}
	text := strings.TrimSpace(string(body))
	if len(text) > maxDetailChars {
		text = text[:maxDetailChars]
	}
	if text == "" {
		return status
	}
	return text
}

// retryAfter is Retry-After in seconds: delta-seconds (digits only) or an HTTP date, capped at maxRetryAfter;
// defaultRetryAfter when absent, negative or anything else ("-5", "1.5", "soon").
func retryAfter(h http.Header) float64 {
	value := strings.TrimSpace(h.Get("Retry-After"))
	if value == "" {
		return defaultRetryAfter
	}
	if deltaSeconds.MatchString(value) {
		if n, err := strconv.ParseFloat(value, 64); err == nil && n < maxRetryAfter {
			return n
		}
		return maxRetryAfter // past any integer type: still a number of seconds, capped
	}
	if at, err := mail.ParseDate(value); err == nil {
		return math.Min(math.Max(time.Until(at).Seconds(), 0), maxRetryAfter)
	}
	return defaultRetryAfter
}

var deltaSeconds = regexp.MustCompile(`^[0-9]+$`)

// check classifies an answer: nil for 2xx; *refused (503/429), *failed (other statuses: a redirect is never
// followed), or a rejection (4xx: the request's fault; a 404 is unknownSequence for sequence calls). It reads and
// closes the body of an answer it does not accept.
func check(resp *http.Response, sequence bool) error {
	status := resp.StatusCode
	if status >= 200 && status < 300 {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	detail := detailOf(body, http.StatusText(status))
	rejection := Rejection{status, detail, resp.Request.URL.String()}
	switch {
	case status == 503 || status == 429:
		wait := retryAfter(resp.Header)
		return &refused{fmt.Sprintf("%d %s (Retry-After %s s)", status, detail, strconv.FormatFloat(wait, 'g', -1, 64)), wait}
	case status == 422:
		return &ValidationError{rejection}
	case status == 404 && sequence:
		return &UnknownSequenceError{rejection}
	case status == 404:
		return &UnknownSchemeError{rejection}
	case status == 401:
		return &UnauthorizedError{rejection}
	case status == 403:
		return &ForbiddenError{rejection}
	case status >= 400 && status < 500:
		return &RequestRejectedError{rejection}
	}
	return failf("%d %s", status, detail)
}

// countRange is the server's max count named by a 422 about the count range, or 0.
func countRange(err error) int {
	bad, ok := err.(*ValidationError)
	if !ok {
		return 0
	}
	m := countRangeRE.FindStringSubmatch(bad.Detail)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
