package idmint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is an idmint stand-in: one scheme ("wiji", IDs "W" + 25 digits), a sequence "s", and a fault switch.
type fake struct {
	*httptest.Server
	seq      atomic.Int64
	requests atomic.Int64
	mode     atomic.Value // "", "refuse", "repeat", "replay", "html", "redirect", "unauthorized", "silent"
	mu       sync.Mutex
	cached   map[string][]byte
}

func newFake(t *testing.T) *fake {
	f := &fake{cached: map[string][]byte{}}
	f.mode.Store("")
	f.seq.Store(MaxSequenceValue - 1_000_000)
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

var issued atomic.Int64 // one ID space for every fake: two fakes never issue one ID

func (f *fake) ids(n int) []string {
	first := issued.Add(int64(n)) - int64(n)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("W%025d", first+int64(i))
	}
	return out
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/fleet":
		w.WriteHeader(404)
		return
	case "/v1/schemes":
		fmt.Fprint(w, `{"schemes": [{"name": "wiji", "formats": ["base32"], "canonical_format": "base32",
			"token_patterns": {"base32": "W[0-9]{25}"}, "limits": {"max_count": 1000}}]}`)
		return
	}
	f.requests.Add(1)
	mode := f.mode.Load().(string)
	switch mode {
	case "silent": // accepts, never answers (until the client goes away)
		<-r.Context().Done()
		return
	case "refuse":
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(503)
		fmt.Fprint(w, `{"detail": "not ready"}`)
		return
	case "redirect":
		http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		return
	case "unauthorized":
		w.WriteHeader(401)
		fmt.Fprint(w, `{"detail": "API key not accepted"}`)
		return
	case "html":
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!doctype html><p>Welcome</p>")
		return
	}
	count, _ := strconv.Atoi(r.URL.Query().Get("count"))
	var body []byte
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/sequences/s/next"):
		first := f.seq.Add(int64(count)) - int64(count)
		values := make([]string, count)
		for i := range values {
			values[i] = strconv.FormatInt(first+int64(i), 10)
		}
		body, _ = json.Marshal(map[string]any{"name": "s", "ids": values})
	case strings.HasPrefix(r.URL.Path, "/v1/sequences/"):
		w.WriteHeader(404)
		fmt.Fprint(w, `{"detail": "no sequence named 'nope'"}`)
		return
	case r.URL.Path == "/v1/ids/wiji":
		if count < 1 || count > 1000 {
			w.WriteHeader(422)
			fmt.Fprint(w, `{"detail": "count must be in 1..1000"}`)
			return
		}
		ids := f.ids(count)
		if mode == "repeat" && count > 1 {
			ids[count-1] = ids[0]
		}
		body, _ = json.Marshal(map[string]any{"scheme": "wiji", "format": "base32", "ids": ids})
	case r.URL.Path == "/v1/ids/wiji/stream":
		w.Header().Set("Content-Type", "text/plain; charset=us-ascii")
		body = []byte(strings.Join(f.ids(count), "\n") + "\n")
	default:
		w.WriteHeader(404)
		fmt.Fprint(w, `{"detail": "unknown scheme"}`)
		return
	}
	if mode == "replay" {
		f.mu.Lock()
		if cached, ok := f.cached[r.URL.String()]; ok {
			body = cached
		} else {
			f.cached[r.URL.String()] = body
		}
		f.mu.Unlock()
	}
	w.Write(body) //nolint:errcheck
}

func client(t *testing.T, opts Options, urls ...string) *Client {
	t.Helper()
	c, err := New(urls, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestIDsSplitAboveTheMaxCountAndStream(t *testing.T) {
	f := newFake(t)
	c := client(t, Options{}, f.URL)
	ctx := context.Background()
	ids, err := c.IDs(ctx, "wiji", 2500)
	if err != nil || len(ids) != 2500 {
		t.Fatalf("IDs: %d, %v", len(ids), err)
	}
	if got := f.requests.Load(); got != 3 {
		t.Fatalf("%d batch requests for 2,500 IDs at 1,000 each", got)
	}
	s := c.Stream(ctx, "wiji", 10_000)
	n := 0
	for s.Next() {
		n++
	}
	if s.Err() != nil || n != 10_000 {
		t.Fatalf("stream: %d, %v", n, s.Err())
	}
}

func TestNewIDFromManyGoroutinesNeverTwice(t *testing.T) {
	f := newFake(t)
	c := client(t, Options{}, f.URL)
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]string, 0, 5000)
			for i := 0; i < 5000; i++ {
				id, err := c.NewID(context.Background(), "wiji")
				if err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, id)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range mine {
				if seen[id] {
					t.Errorf("%s handed out twice", id)
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()
	if len(seen) != 80_000 {
		t.Fatalf("%d distinct IDs", len(seen))
	}
}

func TestMaxAgeDiscardsStaleIDs(t *testing.T) {
	f := newFake(t)
	c := client(t, Options{MaxAge: 100 * time.Millisecond}, f.URL)
	first, _ := c.NewID(context.Background(), "wiji")
	time.Sleep(150 * time.Millisecond)
	before := f.requests.Load()
	second, err := c.NewID(context.Background(), "wiji")
	if err != nil || second == first || f.requests.Load() == before {
		t.Fatalf("a stale buffer was used: %s %s %v", first, second, err)
	}
}

func TestRejectionsAreTypedAndNotRetried(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := client(t, Options{APIKey: "k"}, a.URL, b.URL)
	ctx := context.Background()
	var bad *ValidationError
	if _, err := c.IDs(ctx, "wiji", 0); !errors.As(err, &bad) || bad.Status != 422 {
		t.Fatalf("count 0: %v", err)
	}
	var unknown *UnknownSchemeError
	if _, err := c.IDs(ctx, "nope", 1); !errors.As(err, &unknown) {
		t.Fatalf("unknown scheme: %v", err)
	}
	var noSequence *UnknownSequenceError
	if _, err := client(t, Options{}, a.URL).Next(ctx, "nope", 1); !errors.As(err, &noSequence) ||
		errors.As(err, &unknown) {
		t.Fatalf("unknown sequence: %v", err)
	}
	a.mode.Store("unauthorized")
	b.mode.Store("unauthorized")
	var denied *UnauthorizedError
	if _, err := c.IDs(ctx, "wiji", 1); !errors.As(err, &denied) || a.requests.Load()+b.requests.Load() != 4 {
		t.Fatalf("401: %v after %d requests", err, a.requests.Load()+b.requests.Load())
	}
	c.Close()
	if _, err := c.NewID(ctx, "wiji"); !errors.Is(err, ErrClientClosed) {
		t.Fatalf("closed: %v", err)
	}
}

func TestFailoverHonoursRetryAfterAndNamesEveryReplica(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.mode.Store("refuse")
	c := client(t, Options{}, a.URL, b.URL)
	for i := 0; i < 6; i++ {
		if _, err := c.IDs(context.Background(), "wiji", 1); err != nil {
			t.Fatal(err)
		}
	}
	if a.requests.Load() != 1 || b.requests.Load() != 6 {
		t.Fatalf("a asked %d times, b %d", a.requests.Load(), b.requests.Load())
	}
	b.mode.Store("html")
	_, err := c.IDs(context.Background(), "wiji", 1)
	var none *NoReplicaAvailableError
	if !errors.As(err, &none) || !strings.Contains(none.Reasons[a.URL], "kept out") ||
		!strings.Contains(none.Reasons[b.URL], "unreadable") {
		t.Fatalf("%v", err)
	}
}

func TestRepeatingReplayingAndRedirectingServersFailOver(t *testing.T) {
	for _, mode := range []string{"repeat", "replay", "redirect"} {
		t.Run(mode, func(t *testing.T) {
			a, b := newFake(t), newFake(t)
			a.mode.Store(mode)
			c := client(t, Options{}, a.URL, b.URL)
			seen := map[string]bool{}
			for i := 0; i < 10; i++ {
				ids, err := c.IDs(context.Background(), "wiji", 5)
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					if seen[id] {
						t.Fatalf("%s handed out twice", id)
					}
					seen[id] = true
				}
			}
			alone := client(t, Options{}, a.URL)
			if mode == "replay" {
				alone.IDs(context.Background(), "wiji", 5) //nolint:errcheck // the cache's answer, new to this client
			}
			_, err := alone.IDs(context.Background(), "wiji", 5)
			var none *NoReplicaAvailableError
			words := map[string]string{"repeat": "twice", "replay": "received before", "redirect": "307"}[mode]
			if !errors.As(err, &none) || !strings.Contains(none.Reasons[a.URL], words) {
				t.Fatalf("%v", err)
			}
		})
	}
}

func TestSequenceIntegersAboveTwoToThe53AreExact(t *testing.T) {
	f := newFake(t)
	c := client(t, Options{}, f.URL)
	values, err := c.Next(context.Background(), "s", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := MaxSequenceValue - 1_000_000
	if values[0] != want || values[2] != want+2 {
		t.Fatalf("%v", values)
	}
}

func TestZeroClientSaysItIsNotConstructed(t *testing.T) {
	var c Client
	ctx := context.Background()
	if _, err := c.IDs(ctx, "wiji", 1); !errors.Is(err, ErrNotConstructed) {
		t.Fatalf("IDs on a zero Client: %v", err)
	}
	if _, err := c.NewID(ctx, "wiji"); !errors.Is(err, ErrNotConstructed) {
		t.Fatalf("NewID on a zero Client: %v", err)
	}
	if _, err := c.Decode(ctx, "x"); !errors.Is(err, ErrNotConstructed) {
		t.Fatalf("Decode on a zero Client: %v", err)
	}
	s := c.Stream(ctx, "wiji", 3)
	for s.Next() {
		t.Fatal("a zero Client's stream handed out an ID")
	}
	if !errors.Is(s.Err(), ErrNotConstructed) {
		t.Fatalf("Stream on a zero Client: %v", s.Err())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// silentClient is a client of a fake that has answered its schemes and then answers nothing.
func silentClient(t *testing.T) *Client {
	f := newFake(t)
	c, err := New([]string{f.URL}, Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Schemes(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mode.Store("silent")
	return c
}

func TestCallersDeadlineIsDeadlineExceeded(t *testing.T) {
	c := silentClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.IDs(ctx, "wiji", 3)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("IDs cut by the caller's deadline: %v", err)
	}
	var noReplica *NoReplicaAvailableError
	if !errors.As(err, &noReplica) {
		t.Fatalf("IDs cut by the caller's deadline is no *NoReplicaAvailableError: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	s := c.Stream(ctx2, "wiji", 3)
	for s.Next() {
	}
	if !errors.Is(s.Err(), context.DeadlineExceeded) {
		t.Fatalf("Stream cut by the caller's deadline: %v", s.Err())
	}
}

// lateTimer is a caller's context whose deadline has passed while its timer has not yet cancelled it: what a loaded
// machine shows for a moment when an attempt's timer, due at the same time, runs first.
type lateTimer struct{ context.Context }

func (lateTimer) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

func TestADeadlinePassedBeforeItsTimerRanIsStillTheCallersDeadline(t *testing.T) {
	c := silentClient(t)
	_, err := c.IDs(lateTimer{context.Background()}, "wiji", 3)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("IDs past the caller's deadline, its timer not yet run: %v", err)
	}
	s := c.Stream(lateTimer{context.Background()}, "wiji", 3)
	for s.Next() {
	}
	if !errors.Is(s.Err(), context.DeadlineExceeded) {
		t.Fatalf("Stream past the caller's deadline, its timer not yet run: %v", s.Err())
	}
}

func TestRetryAfterRule(t *testing.T) {
	for value, want := range map[string]float64{
		"": 1, "7": 7, "0": 0, "-5": 1, "1.5": 1, "soon": 1, "300": 300, "301": 300,
		"1000000000000": 300, "99999999999999999999999999999999": 300,
		"Fri, 31 Dec 9999 23:59:59 GMT": 300, "Thu, 01 Jan 1970 00:00:00 GMT": 0,
	} {
		h := http.Header{}
		if value != "" {
			h.Set("Retry-After", value)
		}
		if got := retryAfter(h); got != want {
			t.Errorf("Retry-After %q: %v s, want %v s", value, got, want)
		}
	}
}
