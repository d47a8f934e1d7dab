package idmint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	maxLineChars = 4096
	readChunk    = 64 << 10
)

// Stream hands out the IDs of one stream call, one at a time, with memory that does not grow with the count:
//
//	s := client.Stream(ctx, "hlc-ulid", 10_000_000)
//	defer s.Close()
//	for s.Next() {
//		fmt.Println(s.ID())
//	}
//	if err := s.Err(); err != nil { ... }
//
// When a replica fails mid-way (a refusal, a lost connection, a truncated transfer), the stream carries on from
// another replica for the remaining count; only complete, checked lines are handed out, so every ID was fully
// issued and none twice. Close it when stopping early.
type Stream struct {
	chunks chan []string
	done   chan struct{}
	cancel context.CancelFunc
	once   sync.Once
	chunk  []string
	pos    int
	id     string
	err    error
	errMu  sync.Mutex
	closed bool
}

// Stream starts a stream of count IDs of scheme (GET /v1/ids/{scheme}/stream). Its timeout bounds each stretch
// without a complete ID. Errors (from Err): *ValidationError, *UnknownSchemeError at once; *NoReplicaAvailableError (its
// Delivered: the IDs already handed out) when no replica can go on.
func (c *Client) Stream(ctx context.Context, scheme string, count int, opts ...IssueOption) *Stream {
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{chunks: make(chan []string), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(s.chunks)
		_, err := c.streamChunks(ctx, scheme, count, issueOf(opts), false, func(lines []string) bool {
			select {
			case s.chunks <- lines:
				return true
			case <-ctx.Done():
				return false
			}
		})
		s.errMu.Lock()
		s.err = err
		s.errMu.Unlock()
	}()
	return s
}

// Next moves to the next ID; false at the end or on an error (see Err).
func (s *Stream) Next() bool {
	for s.pos >= len(s.chunk) {
		chunk, ok := <-s.chunks
		if !ok {
			return false
		}
		s.chunk, s.pos = chunk, 0
	}
	s.id = s.chunk[s.pos]
	s.pos++
	return true
}

// ID is the ID Next moved to.
func (s *Stream) ID() string { return s.id }

// Err is why the stream ended early (nil when every ID was handed out, or after Close).
func (s *Stream) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.closed && errors.Is(s.err, context.Canceled) {
		return nil
	}
	return s.err
}

// Close ends the stream (its request is cancelled); safe to call more than once.
func (s *Stream) Close() {
	s.once.Do(func() {
		s.errMu.Lock()
		s.closed = true
		s.errMu.Unlock()
		s.cancel()
		for range s.chunks { //nolint:revive // drain: the producer ends at its next send
		}
	})
}

// streamChunks is the stream machinery: emit gets each chunk of complete, checked lines (false: stop).
// wholeCall: the timeout bounds the whole call (a refill), else each stretch without progress.
func (c *Client) streamChunks(ctx context.Context, scheme string, count int, is issue, wholeCall bool,
	emit func([]string) bool,
) (int, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	timer := time.AfterFunc(c.opts.Timeout, cancel) // wholeCall: never moved; else moved on at each chunk
	var deadlineMu sync.Mutex
	deadline := time.Now().Add(c.opts.Timeout) // when timer fires
	if parentDeadline, ok := parent.Deadline(); ok && parentDeadline.Before(deadline) {
		deadline = parentDeadline
	}
	defer timer.Stop()
	timedOut := func() bool { return ctx.Err() != nil && deadlineErr(parent) == nil }
	shape, err := c.shape(ctx, scheme, is.format)
	if err != nil {
		return 0, err
	}
	key := is.key(scheme)
	rising := shape.rule(is.options)
	path := issuePath(scheme, true)
	delivered := 0
	reasons := map[string]string{}
	for {
		plan, skipped, err := c.plan(ctx, scheme, true)
		if err != nil {
			return delivered, err
		}
		for k, v := range skipped {
			reasons[k] = v
		}
		progress := false
		for index, base := range plan {
			if c.closed.Load() {
				return delivered, ErrClientClosed
			}
			deadlineMu.Lock()
			share := shareOf(deadline, len(plan)-index)
			deadlineMu.Unlock()
			before := delivered
			if ctx.Err() != nil || deadlineErr(parent) != nil {
				if err := deadlineErr(parent); err != nil {
					return delivered, err
				}
				reasons[base] = fmt.Sprintf("not tried: the timeout of %s s passed", secondsText(c.opts.Timeout))
				continue
			}
			err := c.streamFrom(ctx, share, base+path, is.params(count-delivered), shape, key, rising, count, &delivered,
				before, func(lines []string) bool {
					if !wholeCall {
						timer.Stop()
					}
					ok := emit(lines)
					if !wholeCall {
						deadlineMu.Lock()
						deadline = time.Now().Add(c.opts.Timeout)
						deadlineMu.Unlock()
						timer.Reset(c.opts.Timeout)
					}
					return ok
				})
			if err == nil {
				c.replicas.succeeded(base, scheme)
				return delivered, nil
			}
			if perr := deadlineErr(parent); perr != nil {
				return delivered, perr
			}
			if errors.Is(err, errStopped) {
				return delivered, context.Canceled
			}
			reason, retry := c.classify(ctx, base, scheme, err)
			if !retry {
				return delivered, err
			}
			if timedOut() {
				reason = fmt.Sprintf("timeout: the call's timeout of %s s passed", secondsText(c.opts.Timeout))
			}
			var fail *failed
			if !errors.As(err, &fail) && !strings.Contains(reason, "Retry-After") {
				reason += fmt.Sprintf(" (after %d IDs)", delivered-before)
			}
			reasons[base] = reason
			progress = progress || delivered > before
		}
		if !progress {
			return delivered, &NoReplicaAvailableError{What: fmt.Sprintf("stream %d %s (%d delivered)", count, scheme, delivered),
				Reasons: c.ordered(reasons), Delivered: delivered, order: c.urls}
		}
	}
}

var errStopped = errors.New("the stream's reader stopped")

func (c *Client) streamFrom(ctx context.Context, share time.Duration, target string, params map[string][]string,
	shape *idShape, key string, rising rule, count int, delivered *int, before int, emit func([]string) bool,
) error {
	actx, cancel, began := attempt(ctx, share)
	defer cancel()
	resp, err := c.send(actx, http.MethodGet, target, params)
	late := began()
	if err != nil {
		if late && deadlineErr(ctx) == nil {
			return &failed{shareReason(share)}
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		if err := check(resp, false); err != nil {
			return err
		}
	}
	if kind := resp.Header.Get("Content-Type"); !strings.HasPrefix(kind, "text/plain") {
		if kind == "" {
			kind = "untyped"
		}
		return failf("stream answer is '%s', not text/plain", kind)
	}
	if need := int64(count-*delivered) * int64(shape.longest+1); resp.ContentLength > need {
		return tooLong(resp.ContentLength, need)
	}
	buf := make([]byte, readChunk)
	var partial []byte
	last := "" // a new stream: a new generator, maybe below the last one's
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			data := append(partial, buf[:n]...)
			cut := bytes.LastIndexByte(data, '\n')
			if len(data)-cut-1 > shape.longest {
				number := *delivered - before + 1 + bytes.Count(data[:cut+1], []byte{'\n'})
				return failf("line %d is longer than %d characters, the longest ID: refused unread", number,
					shape.longest)
			}
			if cut < 0 {
				partial = data
			} else {
				text := string(data[:cut])
				partial = append([]byte(nil), data[cut+1:]...)
				if err := checkASCII(text); err != nil {
					return err
				}
				lines := strings.Split(text, "\n")
				first := *delivered - before + 1
				if err := shape.checkLines(text, lines, first); err != nil {
					return err
				}
				if err := c.repeats.check(key, lines, "line", first, rising, last); err != nil {
					return err
				}
				last = lines[len(lines)-1]
				if *delivered+len(lines) > count {
					return failf("stream sent more than the %d IDs asked for", count-before)
				}
				*delivered += len(lines)
				if !emit(lines) {
					return errStopped
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if *delivered < count || len(partial) > 0 {
		return failf("stream ended after %d of %d IDs", *delivered-before, count-before)
	}
	return nil
}

func checkASCII(text string) error {
	for i := 0; i < len(text); i++ {
		if text[i] >= 0x80 {
			return failf("stream is not ASCII text: byte 0x%x at %d", text[i], i)
		}
	}
	return nil
}
