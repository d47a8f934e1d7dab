package idmint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultMaxAge    = time.Second
	DefaultMinRefill = 64
	DefaultMaxRefill = 100_000
	// NoMaxAge as Options.MaxAge: buffered IDs never expire.
	NoMaxAge time.Duration = -1
	// MaxSequenceValue is the largest integer a sequence issues (signed 64-bit).
	MaxSequenceValue = int64(^uint64(0) >> 1)
	// maxBodyBytes bounds every answer but a batch's (the catalogue, decode, sequences): a longer one fails its
	// replica unread.
	maxBodyBytes = 16 << 20
	// framingBytes is what a batch answer may hold besides its IDs' texts (the JSON around them, extra fields).
	framingBytes = 4096
	userAgent    = "idmint-client-go/0.1"
)

var sequenceDigits = regexp.MustCompile(`^(?:0|[1-9][0-9]{0,18})$`)

// Options are a client's settings; the zero value of each field means its default.
type Options struct {
	// Timeout bounds each whole call, failover included (a Stream: each stretch without a complete ID).
	// Default 10 s.
	Timeout time.Duration
	// APIKey is sent as "Authorization: Bearer <key>" when set.
	APIKey string
	// MaxAge is how long a buffered ID may wait before NewID discards it unused, counted from its request's
	// start. Default 1 s; NoMaxAge: no limit.
	MaxAge time.Duration
	// Unbuffered makes NewID ask the server every time.
	Unbuffered bool
	// MinRefill and MaxRefill bound the adaptive refill size (IDs); MaxRefill is also capped by the server's
	// max count. Defaults 64 and 100,000.
	MinRefill, MaxRefill int
	// Transport carries the requests (tests); nil: a clone of http.DefaultTransport. Redirects are never followed.
	Transport http.RoundTripper
}

// Client is a client of an idmint fleet, safe for use by many goroutines. Replicas are tried round-robin with
// failover; every answer is checked (its IDs against the scheme's token pattern from GET /v1/schemes, its scheme
// and format against the question, its length against what the count can need, and for repeats) before any of it
// is handed out, and one that is not what the API promises fails its replica like a dead one. Each attempt's answer
// must begin within its share of the time left (the time left over the replicas left to ask), so a replica that
// accepts and never answers costs a share of the call. Close it when done.
//
// Make one with New: its fields are unexported, and a zero Client (var c idmint.Client) has no replicas: every
// call on it returns ErrNotConstructed, and Close does nothing.
type Client struct {
	urls     []string
	opts     Options
	http     *http.Client
	replicas *replicaSet
	fleets   *fleetCheck
	repeats  *repeats

	catalogueMu sync.Mutex
	catalogue   map[string]schemeJSON
	shapes      map[[2]string]*idShape
	maxCount    atomic.Int64

	buffersMu sync.Mutex
	buffers   map[string]*buffer

	closed     atomic.Bool
	background context.Context
	stop       context.CancelFunc
}

// New makes a client of the replicas (base URLs such as "http://idmint-1:8000"; one string may list several,
// comma-separated). It returns an error for bad settings, naming the rule.
func New(replicas []string, opts Options) (*Client, error) {
	var urls []string
	for _, item := range replicas {
		for _, one := range strings.Split(item, ",") {
			one = strings.TrimRight(strings.TrimSpace(one), "/")
			if one == "" {
				continue
			}
			if !strings.HasPrefix(one, "http://") && !strings.HasPrefix(one, "https://") {
				return nil, fmt.Errorf("replica URL must start with http:// or https://, got %q", one)
			}
			urls = append(urls, one)
		}
	}
	if len(urls) == 0 {
		return nil, errors.New("replicas must name at least one base URL, e.g. 'http://127.0.0.1:8000'")
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("timeout must be > 0, got %v", opts.Timeout)
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.MinRefill == 0 {
		opts.MinRefill = DefaultMinRefill
	}
	if opts.MaxRefill == 0 {
		opts.MaxRefill = DefaultMaxRefill
	}
	if opts.MinRefill < 1 || opts.MinRefill > opts.MaxRefill {
		return nil, fmt.Errorf("refill bounds must satisfy 1 <= MinRefill <= MaxRefill, got %d, %d",
			opts.MinRefill, opts.MaxRefill)
	}
	transport := opts.Transport
	if transport == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		urls: urls,
		opts: opts,
		http: &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		replicas:   newReplicaSet(urls),
		fleets:     newFleetCheck(),
		repeats:    newRepeats(),
		catalogue:  map[string]schemeJSON{},
		shapes:     map[[2]string]*idShape{},
		buffers:    map[string]*buffer{},
		background: ctx,
		stop:       cancel,
	}, nil
}

// URLs are the replicas' base URLs, in the order given.
func (c *Client) URLs() []string { return append([]string(nil), c.urls...) }

// Close stops background refills and closes idle connections; buffered IDs are dropped. Calls after it return
// ErrClientClosed. Idempotent.
func (c *Client) Close() error {
	if c.replicas == nil || c.closed.Swap(true) {
		return nil
	}
	c.stop()
	c.buffersMu.Lock()
	for _, b := range c.buffers {
		b.mu.Lock()
		b.head, b.queue, b.queued = nil, nil, 0
		b.mu.Unlock()
	}
	c.buffersMu.Unlock()
	c.http.CloseIdleConnections()
	return nil
}

// IssueOption sets the text form or a scheme option of an issuing call.
type IssueOption func(*issue)

// WithFormat asks for text form format ("decimal", "hex", "uuid"... as listed by Schemes; default canonical).
func WithFormat(format string) IssueOption { return func(i *issue) { i.format = format } }

// WithOption sets a scheme option (eight-byte "mode", siq or typeid "type", hlc-ulid "after").
func WithOption(name, value string) IssueOption {
	return func(i *issue) {
		if i.options == nil {
			i.options = map[string]string{}
		}
		i.options[name] = value
	}
}

type issue struct {
	format  string
	options map[string]string
}

func issueOf(opts []IssueOption) issue {
	var i issue
	for _, o := range opts {
		o(&i)
	}
	return i
}

func (i issue) params(count int) url.Values {
	v := url.Values{"count": {strconv.Itoa(count)}}
	if i.format != "" {
		v.Set("format", i.format)
	}
	for name, value := range i.options {
		v.Set(name, value)
	}
	return v
}

func (i issue) key(scheme string) string {
	if i.format == "" && len(i.options) == 0 {
		return scheme
	}
	names := make([]string, 0, len(i.options))
	for name := range i.options {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(scheme + "\x00" + i.format)
	for _, name := range names {
		b.WriteString("\x00" + name + "=" + i.options[name])
	}
	return b.String()
}

func issuePath(scheme string, stream bool) string {
	path := "/v1/ids/" + url.PathEscape(scheme)
	if stream {
		path += "/stream"
	}
	return path
}

// -- the call machinery --------------------------------------------------------------------------------------

type request struct {
	method, path, scope, what string
	params                    url.Values
	advance                   bool
	limit                     int64  // the longest answer read, in bytes (0: maxBodyBytes)
	body                      []byte // a JSON request body (nil: none)
	publicIDs                 bool   // a 404 is *UnknownPublicIDError (a reveal call)
}

// callerKey holds, in a context the client bounded with its timeout, the caller's own context.
type callerKey struct{}

// withTimeout is ctx bounded by the client's timeout, remembering the caller's context (callerOf).
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	caller := callerOf(ctx)
	bounded, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	return context.WithValue(bounded, callerKey{}, caller), cancel
}

// deadlineErr is ctx's error, or context.DeadlineExceeded once ctx's deadline has passed though its timer has not
// yet cancelled it: on a loaded machine an attempt's timer, due at the same moment, may run first, and the call must
// still say that the caller's deadline cut it.
func deadlineErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// callerOf is the caller's own context inside ctx (ctx itself when the client has not bounded it).
func callerOf(ctx context.Context) context.Context {
	if caller, ok := ctx.Value(callerKey{}).(context.Context); ok {
		return caller
	}
	return ctx
}

// usable is nil, or why no call can be made: the client is closed, or is a zero Client (not made by New).
func (c *Client) usable() error {
	if c.replicas == nil {
		return ErrNotConstructed
	}
	if c.closed.Load() {
		return ErrClientClosed
	}
	return nil
}

// shareReason is why an attempt was cut: no answer began within its share of the call's time.
func shareReason(share time.Duration) string {
	return fmt.Sprintf("timeout: no answer began within %s s, this replica's share of the call's time",
		strconv.FormatFloat(share.Seconds(), 'g', 2, 64))
}

// shareOf is one attempt's share of the time until deadline among left attempts still to make (all of it for the
// last).
func shareOf(deadline time.Time, left int) time.Duration {
	return time.Until(deadline) / time.Duration(left)
}

// attempt is the context of one attempt: cancelled when no answer has begun within share; began (after the
// headers) stops that clock and says whether it had already run out. The context is cancelled by the returned
// cancel.
func attempt(ctx context.Context, share time.Duration) (context.Context, context.CancelFunc, func() bool) {
	actx, cancel := context.WithCancel(ctx)
	var fired atomic.Bool
	timer := time.AfterFunc(share, func() {
		fired.Store(true)
		cancel()
	})
	began := func() bool {
		timer.Stop()
		return fired.Load()
	}
	return actx, func() { timer.Stop(); cancel() }, began
}

// boundedBody is an answer's body that fails (a *failed) once more than limit bytes have been read.
type boundedBody struct {
	io.ReadCloser
	limit, read int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if b.read > b.limit {
		return n, tooLong(b.read, b.limit)
	}
	return n, err
}

func tooLong(size, limit int64) error {
	return failf("answer is longer than the %d bytes it can need (%d bytes or more): refused unread", limit, size)
}

// bound checks resp's declared length against limit and makes its body fail past it.
func bound(resp *http.Response, limit int64) error {
	if resp.ContentLength > limit {
		return tooLong(resp.ContentLength, limit)
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, limit: limit}
	return nil
}

// call sends r to the replicas in turn until one answers and parse accepts its answer (a *failed or a transport
// error: move on). The deadline is the caller's context with the client's timeout.
func call[T any](ctx context.Context, c *Client, r request, parse func(*http.Response) (T, error)) (T, error) {
	var zero T
	if err := c.usable(); err != nil {
		return zero, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	limit := r.limit
	if limit == 0 {
		limit = maxBodyBytes
	}
	plan, reasons, err := c.plan(ctx, r.scope, r.advance)
	if err != nil {
		return zero, err
	}
	sequence := strings.HasPrefix(r.scope, sequenceScope)
	if sequence {
		if err := c.fleets.checkOneFleet(c.urls); err != nil {
			return zero, err
		}
	}
	for index, base := range plan {
		if deadlineErr(ctx) != nil {
			if reasons[base] == "" {
				reasons[base] = fmt.Sprintf("not tried: the timeout of %s s passed", secondsText(c.opts.Timeout))
			}
			continue
		}
		share := time.Duration(math.MaxInt64)
		if deadline, ok := ctx.Deadline(); ok {
			share = shareOf(deadline, len(plan)-index)
		}
		actx, cancelAttempt, began := attempt(ctx, share)
		late := false
		result, err := func() (T, error) {
			resp, err := c.sendBody(actx, r.method, base+r.path, r.params, r.body)
			late = began()
			if err != nil {
				return zero, err
			}
			defer resp.Body.Close()
			if err := check(resp, sequence); err != nil {
				var unknown *UnknownSchemeError
				if r.publicIDs && errors.As(err, &unknown) {
					return zero, &UnknownPublicIDError{unknown.Rejection}
				}
				return zero, err
			}
			if err := bound(resp, limit); err != nil {
				return zero, err
			}
			return parse(resp)
		}()
		cancelAttempt()
		if err == nil {
			c.replicas.succeeded(base, r.scope)
			return result, nil
		}
		if cut := deadlineErr(ctx); cut != nil && !isRejection(err) { // the answer was cut by the deadline
			err = cut
		} else if late && !isRejection(err) { // no answer began within this attempt's share
			err = &failed{shareReason(share)}
		}
		if reason, retry := c.classify(ctx, base, r.scope, err); retry {
			reasons[base] = reason
			continue
		}
		return zero, err
	}
	if err := parentDone(ctx); err != nil {
		return zero, err
	}
	return zero, &NoReplicaAvailableError{What: r.what, Reasons: c.ordered(reasons), order: c.urls,
		cause: deadlineErr(callerOf(ctx))}
}

// classify records a replica's failure and says whether the call goes on to the next replica; rejections and a
// closed client end the call.
func (c *Client) classify(ctx context.Context, base, scope string, err error) (string, bool) {
	var ref *refused
	var fail *failed
	switch {
	case errors.As(err, &ref):
		c.replicas.refused(base, scope, ref)
		return ref.reason, true
	case errors.As(err, &fail):
		c.replicas.failed(base, fail.reason)
		return fail.reason, true
	case errors.Is(err, ErrClientClosed):
		return "", false
	case isRejection(err):
		return "", false
	}
	reason := c.transportReason(ctx, err)
	c.replicas.failed(base, reason)
	return reason, true
}

func isRejection(err error) bool {
	switch err.(type) {
	case *ValidationError, *UnknownSchemeError, *UnknownSequenceError, *UnknownPublicIDError, *UnauthorizedError,
		*ForbiddenError,
		*RequestRejectedError:
		return true
	}
	return false
}

// parentDone is the error of a context its caller cancelled (not the client's own timeout), else nil.
func parentDone(ctx context.Context) error {
	if err := callerOf(ctx).Err(); errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (c *Client) transportReason(ctx context.Context, err error) string {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("timeout: the call's timeout of %s s passed", secondsText(c.opts.Timeout))
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	return err.Error()
}

func secondsText(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) }

func (c *Client) ordered(reasons map[string]string) map[string]string {
	out := make(map[string]string, len(c.urls))
	for _, u := range c.urls {
		if reason, ok := reasons[u]; ok {
			out[u] = reason
		} else {
			out[u] = "not tried"
		}
	}
	return out
}

func (c *Client) send(ctx context.Context, method, target string, params url.Values) (*http.Response, error) {
	return c.sendBody(ctx, method, target, params, nil)
}

// sendBody is send with a JSON request body (nil: none).
func (c *Client) sendBody(ctx context.Context, method, target string, params url.Values, body []byte) (*http.Response,
	error,
) {
	if params != nil {
		target += "?" + params.Encode()
	}
	var content io.Reader
	if body != nil {
		content = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, content)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", userAgent)
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	return c.http.Do(req)
}

// plan is the replicas to try for scope (and why others are out), each one's fleet read first: one whose fleet
// cannot be read is failed over. Returns a *FleetOverlapError.
func (c *Client) plan(ctx context.Context, scope string, advance bool) ([]string, map[string]string, error) {
	plan, reasons := c.replicas.plan(scope, advance)
	for _, base := range c.fleets.unread(plan) {
		// Each fleet read within a replica's share of the timeout: a hung replica does not cost the whole call.
		fctx, cancel := context.WithTimeout(ctx, c.opts.Timeout/time.Duration(len(c.urls)))
		doc, err := c.readFleet(fctx, base)
		if err == nil {
			err = c.fleets.learn(base, doc, func(other string) *bool { return c.memberLive(fctx, other, doc.Member) })
		}
		if err != nil && fctx.Err() != nil && ctx.Err() == nil {
			err = &failed{shareReason(c.opts.Timeout / time.Duration(len(c.urls)))}
		}
		cancel()
		if err != nil {
			var overlapErr *FleetOverlapError
			if errors.As(err, &overlapErr) {
				return nil, nil, err
			}
		}
		if err != nil {
			reasons[base] = fmt.Sprintf("its fleet (/v1/fleet) could not be read: %v", c.reasonOf(ctx, err))
			c.replicas.failed(base, reasons[base])
		}
	}
	known := plan[:0:0]
	for _, base := range plan {
		if c.fleets.known(base) {
			known = append(known, base)
		}
	}
	return known, reasons, nil
}

func (c *Client) reasonOf(ctx context.Context, err error) string {
	var fail *failed
	if errors.As(err, &fail) {
		return fail.reason
	}
	return c.transportReason(ctx, err)
}

func (c *Client) readFleet(ctx context.Context, base string) (*fleetDoc, error) {
	resp, err := c.send(ctx, http.MethodGet, base+"/v1/fleet", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, failf("%d %s", resp.StatusCode, detailOf(body, http.StatusText(resp.StatusCode)))
	}
	doc, err := parseFleet(body)
	if err != nil {
		return nil, &failed{err.Error()}
	}
	return doc, nil
}

func (c *Client) memberLive(ctx context.Context, base, token string) *bool {
	resp, err := c.send(ctx, http.MethodGet, base+"/v1/fleet/members/"+url.PathEscape(token), nil)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var answer struct {
		Live *bool `json:"live"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&answer) != nil {
		return nil
	}
	return answer.Live
}

// -- the catalogue -------------------------------------------------------------------------------------------

// Schemes lists the schemes the fleet serves (GET /v1/schemes of one replica), with their forms and limits.
func (c *Client) Schemes(ctx context.Context) ([]SchemeInfo, error) {
	return c.fetchCatalogue(ctx, true)
}

func (c *Client) fetchCatalogue(ctx context.Context, advance bool) ([]SchemeInfo, error) {
	type answer struct {
		Schemes []json.RawMessage `json:"schemes"`
	}
	raws, err := call(ctx, c, request{method: "GET", path: "/v1/schemes", scope: allScopes, what: "schemes",
		advance: advance}, func(resp *http.Response) ([]json.RawMessage, error) {
		var a answer
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&a); err != nil {
			return nil, failf("unreadable answer: %v", err)
		}
		return a.Schemes, nil
	})
	if err != nil {
		return nil, err
	}
	infos := make([]SchemeInfo, 0, len(raws))
	catalogue := map[string]schemeJSON{}
	maxCount := int64(0)
	for _, raw := range raws {
		var s schemeJSON
		if err := json.Unmarshal(raw, &s); err != nil || s.Name == "" {
			continue
		}
		if s.CanonicalFormat == "" && len(s.Formats) > 0 {
			s.CanonicalFormat = s.Formats[0]
		}
		catalogue[s.Name] = s
		if s.Limits.MaxCount > 0 && (maxCount == 0 || int64(s.Limits.MaxCount) < maxCount) {
			maxCount = int64(s.Limits.MaxCount)
		}
		infos = append(infos, SchemeInfo{Name: s.Name, Formats: s.Formats, CanonicalFormat: s.CanonicalFormat,
			MaxCount: s.Limits.MaxCount, MaxStreamCount: s.Limits.MaxStreamCount, Node: s.Node,
			TokenPatterns: s.TokenPatterns, Raw: raw})
	}
	c.catalogueMu.Lock()
	c.catalogue = catalogue
	c.shapes = map[[2]string]*idShape{}
	c.catalogueMu.Unlock()
	if maxCount > 0 {
		c.maxCount.Store(maxCount)
	}
	return infos, nil
}

// shape is what answers for scheme in form format must look like (the catalogue is fetched when needed).
func (c *Client) shape(ctx context.Context, scheme, format string) (*idShape, error) {
	if s := c.knownShape(scheme, format, false); s != nil {
		return s, nil
	}
	if _, err := c.fetchCatalogue(ctx, false); err != nil {
		return nil, err
	}
	return c.knownShape(scheme, format, true), nil
}

func (c *Client) knownShape(scheme, format string, fetched bool) *idShape {
	c.catalogueMu.Lock()
	defer c.catalogueMu.Unlock()
	if s, ok := c.shapes[[2]string{scheme, format}]; ok {
		return s
	}
	info, ok := c.catalogue[scheme]
	if !ok && !fetched {
		return nil
	}
	form := format
	if form == "" || form == "canonical" {
		form = info.CanonicalFormat
	}
	pattern, known := info.TokenPatterns[form]
	if form == "" {
		form = "canonical"
	}
	s := newShape(scheme, form, pattern, ok && known)
	if longest := info.MaxLengths[form]; longest > 0 {
		s.longest = longest
	}
	if form == PublicFormat { // public IDs keep no order and are no integers: the recent-ID rule only
		c.shapes[[2]string{scheme, format}] = s
		return s
	}
	var rising map[string]map[string][]string
	if json.Unmarshal(info.Rising, &rising) == nil { // unreadable: no form is checked for order
		s.rising, s.risingKnown = rising[form]
	}
	var perIdentity map[string]json.RawMessage
	if json.Unmarshal(info.PerIdentity, &perIdentity) == nil {
		s.order, s.orderNeeds = parseIdentityOrder(perIdentity[form])
	}
	c.shapes[[2]string{scheme, format}] = s
	return s
}

// -- batches -------------------------------------------------------------------------------------------------

// IDs returns count fresh IDs of scheme (unbuffered), in issue order. Above the server's max count the request
// is split into several batch calls. Errors: *ValidationError (count, option or format), *UnknownSchemeError,
// *NoReplicaAvailableError, *FleetOverlapError.
func (c *Client) IDs(ctx context.Context, scheme string, count int, opts ...IssueOption) ([]string, error) {
	is := issueOf(opts)
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if _, err := c.shape(ctx, scheme, is.format); err != nil {
		return nil, err
	}
	limit := int(c.maxCount.Load())
	if limit == 0 || count <= limit {
		ids, err := c.issue(ctx, scheme, count, is)
		if err == nil {
			return ids, nil
		}
		if limit = countRange(err); limit < 1 || limit >= count {
			return nil, err
		}
		c.maxCount.Store(int64(limit))
	}
	out := make([]string, 0, count)
	for len(out) < count {
		n := count - len(out)
		if n > limit {
			n = limit
		}
		ids, err := c.issue(ctx, scheme, n, is)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

func (c *Client) issue(ctx context.Context, scheme string, count int, is issue) ([]string, error) {
	shape, err := c.shape(ctx, scheme, is.format)
	if err != nil {
		return nil, err
	}
	key := is.key(scheme)
	limit := int64(count)*int64(shape.longest+3) + framingBytes
	return call(ctx, c, request{method: "GET", path: issuePath(scheme, false), scope: scheme,
		params: is.params(count), what: fmt.Sprintf("issue %d %s", count, scheme), advance: true, limit: limit},
		func(resp *http.Response) ([]string, error) {
			return c.parseIDs(resp, count, shape, key, shape.rule(is.options))
		})
}

func (c *Client) parseIDs(resp *http.Response, count int, shape *idShape, key string, rising rule) ([]string,
	error,
) {
	var answer struct {
		Scheme any   `json:"scheme"`
		Format any   `json:"format"`
		IDs    []any `json:"ids"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return nil, failf("unreadable batch answer: %v", err)
	}
	if shape.missing == "" && (answer.Scheme != shape.scheme || answer.Format != shape.format) {
		return nil, failf("answer is labelled scheme '%v' format '%v', asked scheme '%s' format '%s'",
			answer.Scheme, answer.Format, shape.scheme, shape.format)
	}
	if answer.IDs == nil || len(answer.IDs) != count {
		return nil, failf("batch answer holds %d IDs, asked for %d", len(answer.IDs), count)
	}
	ids := make([]string, count)
	for i, one := range answer.IDs {
		text, ok := one.(string)
		if !ok {
			return nil, failf("ID %d is not a %s ID (%s): %s", i+1, shape.scheme, shape.format, shown(fmt.Sprint(one)))
		}
		ids[i] = text
	}
	if err := shape.checkIDs(ids); err != nil {
		return nil, err
	}
	if err := c.repeats.check(key, ids, "ID", 1, rising, ""); err != nil {
		return nil, err
	}
	return ids, nil
}

// -- decode --------------------------------------------------------------------------------------------------

// Decode reads id (any accepted text form) as every scheme that accepts it, the plausible readings first.
// Errors: *ValidationError naming the rule the ID breaks, *NoReplicaAvailableError.
func (c *Client) Decode(ctx context.Context, id string) (*Candidates, error) {
	return call(ctx, c, request{method: "GET", path: "/v1/decode/" + url.PathEscape(id), scope: allScopes,
		what: fmt.Sprintf("decode %q", id), advance: true}, func(resp *http.Response) (*Candidates, error) {
		var answer struct {
			Input      string        `json:"input"`
			Candidates []decodedJSON `json:"candidates"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&answer); err != nil {
			return nil, failf("unreadable answer: %v", err)
		}
		out := &Candidates{Input: answer.Input}
		for _, one := range answer.Candidates {
			out.Candidates = append(out.Candidates, one.decoded())
		}
		return out, nil
	})
}

// DecodeAs reads id as scheme. Errors: *ValidationError naming the rule the ID breaks, *UnknownSchemeError,
// *NoReplicaAvailableError.
func (c *Client) DecodeAs(ctx context.Context, scheme, id string) (*Decoded, error) {
	return call(ctx, c, request{method: "GET", path: "/v1/decode/" + url.PathEscape(scheme) + "/" + url.PathEscape(id),
		scope: allScopes, what: fmt.Sprintf("decode %q", id), advance: true}, func(resp *http.Response) (*Decoded, error) {
		var answer decodedJSON
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&answer); err != nil {
			return nil, failf("unreadable answer: %v", err)
		}
		out := answer.decoded()
		return &out, nil
	})
}

// -- sequences -----------------------------------------------------------------------------------------------

func sequencePath(name, verb string) string {
	return "/v1/sequences/" + url.PathEscape(name) + "/" + verb
}

func sequenceInteger(value any, what string) (int64, error) {
	text, ok := value.(string)
	if ok && sequenceDigits.MatchString(text) {
		if v, err := strconv.ParseInt(text, 10, 64); err == nil {
			return v, nil
		}
	}
	shownValue := fmt.Sprint(value)
	if len(shownValue) > 40 {
		shownValue = shownValue[:40]
	}
	return 0, failf("%s is not a sequence integer (decimal digits in 0..2**63-1): '%s'", what, shownValue)
}

// Next returns count integers of sequence name (1..the server's max count), rising, exact (asked as strings).
// Never the same integer twice from any server of the fleet; a call that fails over leaves a gap, never a repeat.
// Errors: *ValidationError (count, name), *UnknownSequenceError, *NoReplicaAvailableError, *SequenceStoresDifferError.
func (c *Client) Next(ctx context.Context, name string, count int) ([]int64, error) {
	return call(ctx, c, request{method: "GET", path: sequencePath(name, "next"), scope: sequenceScope + name,
		params: url.Values{"count": {strconv.Itoa(count)}, "format": {"string"}}, advance: true,
		what: fmt.Sprintf("next %d of sequence %s", count, name)}, func(resp *http.Response) ([]int64, error) {
		var answer struct {
			Name *string `json:"name"`
			IDs  []any   `json:"ids"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&answer); err != nil ||
			answer.Name == nil || answer.IDs == nil {
			return nil, failf("unreadable next answer: %v", err)
		}
		if *answer.Name != name || len(answer.IDs) != count {
			return nil, failf("next answer for %q holds %d integers; asked %d of %q", *answer.Name, len(answer.IDs),
				count, name)
		}
		values := make([]int64, count)
		for i, one := range answer.IDs {
			v, err := sequenceInteger(one, fmt.Sprintf("integer %d", i+1))
			if err != nil {
				return nil, err
			}
			if i > 0 && v <= values[i-1] {
				return nil, failf("next answer is not rising at integer %d: %d then %d", i+1, values[i-1], v)
			}
			values[i] = v
		}
		if err := c.repeats.checkNext(name, values); err != nil {
			return nil, err
		}
		return values, nil
	})
}

// Range reserves a fresh contiguous range of count integers (1..2**40) of sequence name in storage, for offline
// jobs. Errors as Next; a range past 2**63-1 is a *ValidationError naming the rule.
func (c *Client) Range(ctx context.Context, name string, count int64) (SequenceRange, error) {
	return call(ctx, c, request{method: "POST", path: sequencePath(name, "range"), scope: sequenceScope + name,
		params: url.Values{"count": {strconv.FormatInt(count, 10)}, "format": {"string"}}, advance: true,
		what: fmt.Sprintf("range of %d of sequence %s", count, name)}, func(resp *http.Response) (SequenceRange, error) {
		var answer struct {
			Name  *string `json:"name"`
			First any     `json:"first"`
			Last  any     `json:"last"`
			Count any     `json:"count"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&answer); err != nil ||
			answer.Name == nil {
			return SequenceRange{}, failf("unreadable range answer: %v", err)
		}
		first, err := sequenceInteger(answer.First, "first")
		if err != nil {
			return SequenceRange{}, err
		}
		last, err := sequenceInteger(answer.Last, "last")
		if err != nil {
			return SequenceRange{}, err
		}
		counted, isNumber := answer.Count.(float64)
		if *answer.Name != name || last-first+1 != count || !isNumber || int64(counted) != count {
			return SequenceRange{}, failf("range answer %q %v..%v (count %v) is not %d of %q", *answer.Name,
				answer.First, answer.Last, answer.Count, count, name)
		}
		if err := c.repeats.checkRange(name, first, last); err != nil {
			return SequenceRange{}, err
		}
		return SequenceRange{Name: name, First: first, Last: last}, nil
	})
}
