package idmint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// publicFake is an idmint stand-in for public IDs: snowflake's public form (18 characters) in a catalogue that
// (wrongly) lists it as rising, a sequence "s", and /v1/public opening the texts it handed out. Each answer of
// answers is served once, in turn, for the issuing routes (then fresh, falling texts); without keys every call is
// a 422 naming the setting.
type publicFake struct {
	*httptest.Server
	mu      sync.Mutex
	answers [][]string
	opened  map[string]int
	bodies  []int // the number of texts of each POST /v1/public
	made    int
	noKeys  bool
}

func newPublicFake(t *testing.T, noKeys bool) *publicFake {
	f := &publicFake{opened: map[string]int{}, noKeys: noKeys}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *publicFake) fresh(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%017d1", 99_999_999-f.made) // falling: a rising-order check would refuse them
		f.made++
	}
	return out
}

func (f *publicFake) issue(count int) []string {
	texts := f.fresh(count)
	if len(f.answers) > 0 {
		texts, f.answers = f.answers[0], f.answers[1:]
	}
	for _, t := range texts {
		f.opened[t] = len(f.opened) + 1
	}
	return texts
}

func (f *publicFake) item(text string) map[string]any {
	value, ok := f.opened[text]
	if !ok {
		return map[string]any{"error": "no key in force opens this public ID"}
	}
	return map[string]any{"id": strconv.Itoa(value), "scheme": "sequence", "key_id": 1, "decoded": nil}
}

func (f *publicFake) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := r.URL.Path
	switch {
	case path == "/v1/fleet":
		w.WriteHeader(404)
		return
	case path == "/v1/schemes":
		fmt.Fprint(w, `{"schemes": [{"name": "snowflake", "formats": ["decimal"], "canonical_format": "decimal",
			"token_patterns": {"decimal": "[0-9]{1,19}", "public": "[0-9A-HJKMNP-TV-Z]{17}[1-9A-F]"},
			"rising": {"decimal": {}, "public": {}}, "limits": {"max_count": 1000}}]}`)
		return
	case f.noKeys:
		w.WriteHeader(422)
		fmt.Fprint(w, `{"detail": "format=public and /v1/public need public-ID keys: set IDMINT_PUBLIC_ID_KEYS_FILE"}`)
		return
	}
	count, _ := strconv.Atoi(r.URL.Query().Get("count"))
	switch {
	case path == "/v1/ids/snowflake":
		json.NewEncoder(w).Encode(map[string]any{"scheme": "snowflake", "format": r.URL.Query().Get("format"),
			"ids": f.issue(count)})
	case path == "/v1/ids/snowflake/stream":
		w.Header().Set("Content-Type", "text/plain; charset=us-ascii")
		fmt.Fprint(w, strings.Join(f.issue(count), "\n")+"\n")
	case path == "/v1/sequences/s/next":
		json.NewEncoder(w).Encode(map[string]any{"name": "s", "ids": f.issue(count)})
	case strings.HasPrefix(path, "/v1/public/"):
		text, _ := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/public/"))
		item := f.item(text)
		if reason, ok := item["error"]; ok {
			w.WriteHeader(404)
			json.NewEncoder(w).Encode(map[string]any{"detail": reason})
			return
		}
		item["error"] = nil
		json.NewEncoder(w).Encode(item)
	case path == "/v1/public" && r.Method == "POST":
		var body struct {
			Texts []string `json:"texts"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		f.bodies = append(f.bodies, len(body.Texts))
		items := make([]map[string]any, len(body.Texts))
		for i, text := range body.Texts {
			items[i] = f.item(text)
		}
		json.NewEncoder(w).Encode(map[string]any{"items": items})
	default:
		w.WriteHeader(404)
		fmt.Fprint(w, `{"detail": "unknown"}`)
	}
}

func TestPublicFormatIsPassedThroughAndRevealReadsTheTextsBack(t *testing.T) {
	f := newPublicFake(t, false)
	c, err := New([]string{f.URL}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	batch, err := c.IDs(ctx, "snowflake", 50, WithFormat(PublicFormat)) // falling: never checked for order
	if err != nil || len(batch) != 50 {
		t.Fatalf("IDs: %v %d", err, len(batch))
	}
	one, err := c.NewID(ctx, "snowflake", WithFormat(PublicFormat))
	if err != nil {
		t.Fatal(err)
	}
	texts, err := c.NextPublic(ctx, "s", 5)
	if err != nil || len(texts) != 5 {
		t.Fatalf("NextPublic: %v %v", err, texts)
	}
	asked := append(append(append([]string{}, batch...), one), texts...)
	asked = append(asked, "000000000000000001")
	items, err := c.RevealMany(ctx, asked)
	if err != nil || len(items) != 57 {
		t.Fatalf("RevealMany: %v %d", err, len(items))
	}
	last := items[56]
	if last.Error != "no key in force opens this public ID" || last.Text != "000000000000000001" || last.ID != "" {
		t.Fatalf("an unopened item: %+v", last)
	}
	first := items[0]
	if first.Error != "" || first.Text != batch[0] || first.Scheme != "sequence" || first.KeyID != 1 || first.Decoded != nil {
		t.Fatalf("an opened item: %+v", first)
	}
	got, err := c.Reveal(ctx, batch[0])
	if err != nil || *got != first {
		t.Fatalf("Reveal: %v %+v", err, got)
	}
	_, err = c.Reveal(ctx, "000000000000000001")
	var unknown *UnknownPublicIDError
	if !errors.As(err, &unknown) || unknown.Status != 404 {
		t.Fatalf("Reveal of an unopened text: %T %v", err, err)
	}
	if empty, err := c.RevealMany(ctx, nil); err != nil || len(empty) != 0 {
		t.Fatalf("RevealMany(nil): %v %v", err, empty)
	}
}

func TestAPublicTextTwiceFailsItsServer(t *testing.T) {
	f := newPublicFake(t, false)
	a, b := f.fresh(2)[0], f.fresh(1)[0]
	f.answers = [][]string{{a, b, a}, {a, b}, {b}, {a, a}, {"12"}}
	c, _ := New([]string{f.URL}, Options{})
	defer c.Close()
	ctx := context.Background()
	var none *NoReplicaAvailableError
	if _, err := c.IDs(ctx, "snowflake", 3, WithFormat(PublicFormat)); !errors.As(err, &none) ||
		!strings.Contains(err.Error(), "twice") {
		t.Fatalf("a text twice in one answer: %v", err)
	}
	if got, err := c.IDs(ctx, "snowflake", 2, WithFormat(PublicFormat)); err != nil || got[0] != a {
		t.Fatalf("%v %v", err, got)
	}
	if _, err := c.IDs(ctx, "snowflake", 1, WithFormat(PublicFormat)); err == nil ||
		!strings.Contains(err.Error(), "received before") {
		t.Fatalf("a text of an earlier answer: %v", err)
	}
	if _, err := c.NextPublic(ctx, "s", 2); !errors.As(err, &none) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a sequence text twice: %v", err)
	}
	if _, err := c.NextPublic(ctx, "s", 1); err == nil ||
		!strings.Contains(err.Error(), "not a sequence integer's public text") {
		t.Fatalf("a misshapen sequence text: %v", err)
	}
}

func TestRevealManySplitsAndWithoutKeysIsAValidationError(t *testing.T) {
	f := newPublicFake(t, false)
	c, _ := New([]string{f.URL}, Options{})
	defer c.Close()
	ctx := context.Background()
	texts := make([]string, 12_000)
	for i := range texts {
		texts[i] = strconv.Itoa(i)
	}
	items, err := c.RevealMany(ctx, texts)
	if err != nil || len(items) != 12_000 || fmt.Sprint(f.bodies) != "[10000 2000]" {
		t.Fatalf("%v %d %v", err, len(items), f.bodies)
	}
	bare, _ := New([]string{newPublicFake(t, true).URL}, Options{})
	defer bare.Close()
	var bad *ValidationError
	if _, err := bare.IDs(ctx, "snowflake", 1, WithFormat(PublicFormat)); !errors.As(err, &bad) ||
		!strings.Contains(bad.Detail, "IDMINT_PUBLIC_ID_KEYS_FILE") {
		t.Fatalf("without keys: %T %v", err, err)
	}
	if _, err := bare.Reveal(ctx, "x"); !errors.As(err, &bad) {
		t.Fatalf("reveal without keys: %T %v", err, err)
	}
}
