package idmint

import (
	"context"
	"math"
	"sync"
	"time"
)

// How NewID works (the same rules as the Python and TypeScript clients): each (scheme, options, format) has its
// own buffer. IDs arrive in batches from the stream route; a batch may be handed out until MaxAge after its
// request started. A background goroutine asks for the next batch while enough IDs remain for about three request
// latencies of use. The refill size follows the rate of use: about MaxAge/2 of use (at most 1 s), between
// MinRefill and MaxRefill; IDs expiring unused halve the rate estimate, a draw finding the buffer empty doubles
// it. Unused IDs are only wasted, never handed out twice: a buffer dies with its client.

const (
	segmentsPerBatch = 4
	rateWindow       = 0.05 // seconds
	rateEWMA         = 0.5
	expiredRateCut   = 0.5
	missedRateBoost  = 2.0
	rateMaxPerS      = 1e9
	maxHorizon       = 1.0 // seconds
	latencyMargin    = 3.0
)

type segment struct {
	deadline time.Time // zero: never expires
	ids      []string
	pos      int
}

func (s *segment) fresh(now time.Time) bool { return s.deadline.IsZero() || now.Before(s.deadline) }

type buffer struct {
	mu         sync.Mutex
	scheme     string
	is         issue
	head       *segment
	queue      []*segment
	queued     int
	refilling  bool
	wait       chan struct{}
	generation int
	lastErr    error

	minRefill, maxRefill int
	maxAge               time.Duration
	horizon              float64
	rate                 float64
	windowStart          time.Time
	windowDrawn          int
	latency              float64
	refills              int
	boostedAt            int
}

// NewID returns one fresh ID of scheme (WithFormat, WithOption as for IDs) from this client's buffer for that
// (scheme, options, format), refilled in the background before it runs dry; IDs older than MaxAge are discarded
// unused. Safe for many goroutines: no two calls ever return the same ID. Errors: *NoReplicaAvailableError when the buffer
// is empty and no replica can issue; *ValidationError / *UnknownSchemeError for a bad scheme, option or format.
func (c *Client) NewID(ctx context.Context, scheme string, opts ...IssueOption) (string, error) {
	if c.buffers == nil {
		return "", ErrNotConstructed
	}
	key := scheme
	var is issue
	if len(opts) > 0 {
		is = issueOf(opts)
		key = is.key(scheme)
	}
	b := c.bufferFor(key, scheme, is)
	b.mu.Lock()
	if h := b.head; h != nil && h.pos < len(h.ids) && h.fresh(time.Now()) {
		id := h.ids[h.pos]
		h.pos++
		b.mu.Unlock()
		return id, nil
	}
	return c.newIDSlow(ctx, b)
}

func (c *Client) bufferFor(key, scheme string, is issue) *buffer {
	c.buffersMu.Lock()
	b := c.buffers[key]
	if b == nil {
		maxAge := c.opts.MaxAge
		horizon := maxHorizon
		if maxAge > 0 {
			horizon = math.Min(maxAge.Seconds()/2, maxHorizon)
		}
		b = &buffer{scheme: scheme, is: is, minRefill: c.opts.MinRefill, maxRefill: c.opts.MaxRefill,
			maxAge: maxAge, horizon: horizon, windowStart: time.Now(), boostedAt: -1}
		c.buffers[key] = b
	}
	c.buffersMu.Unlock()
	return b
}

// newIDSlow is NewID past the head segment (b.mu held; released on return).
func (c *Client) newIDSlow(ctx context.Context, b *buffer) (string, error) {
	if c.closed.Load() {
		b.mu.Unlock()
		return "", ErrClientClosed
	}
	if c.opts.Unbuffered {
		b.mu.Unlock()
		ids, err := c.IDs(ctx, b.scheme, 1, func(i *issue) { *i = b.is })
		if err != nil {
			return "", err
		}
		return ids[0], nil
	}
	missed := false
	for {
		now := time.Now()
		if h := b.head; h != nil {
			if h.pos < len(h.ids) && h.fresh(now) {
				id := h.ids[h.pos]
				h.pos++
				b.mu.Unlock()
				return id, nil
			}
			b.retire(now)
		}
		if b.nextSegment(now) {
			if b.wantsRefill(c.maxCount.Load()) {
				c.schedule(b)
			}
			continue
		}
		if !missed {
			missed = true
			b.noteMiss()
		}
		if b.refilling { // a refill is on its way: wait for it (its failure is ours)
			wait, generation := b.wait, b.generation
			b.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			b.mu.Lock()
			if b.generation != generation && len(b.queue) == 0 && b.lastErr != nil {
				err := b.lastErr
				b.mu.Unlock()
				return "", err
			}
			continue
		}
		b.begin()
		size := b.refillSize(c.maxCount.Load())
		b.mu.Unlock()
		ids, started, latency, err := c.fetch(ctx, b, size)
		b.mu.Lock()
		b.end(err)
		if err != nil {
			b.mu.Unlock()
			return "", err
		}
		b.noteDrawn(1, time.Now())
		b.add(ids[1:], started, latency)
		b.mu.Unlock()
		return ids[0], nil
	}
}

func (b *buffer) begin() {
	b.refilling = true
	b.wait = make(chan struct{})
}

func (b *buffer) end(err error) {
	b.refilling = false
	b.generation++
	b.lastErr = err
	close(b.wait)
}

// fetch is one refill request of size IDs through the stream route (its text costs less to read than JSON).
func (c *Client) fetch(ctx context.Context, b *buffer, size int) ([]string, time.Time, float64, error) {
	started := time.Now()
	ids := make([]string, 0, size)
	_, err := c.streamChunks(ctx, b.scheme, size, b.is, true, func(lines []string) bool {
		ids = append(ids, lines...)
		return true
	})
	return ids, started, time.Since(started).Seconds(), err
}

// schedule starts a background refill of b (b.mu held).
func (c *Client) schedule(b *buffer) {
	b.begin()
	size := b.refillSize(c.maxCount.Load())
	go func() {
		ids, started, latency, err := c.fetch(c.background, b, size)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.end(err)
		if err == nil {
			b.add(ids, started, latency)
			if b.wantsRefill(c.maxCount.Load()) && !c.closed.Load() {
				c.schedule(b)
			}
		}
	}()
}

// -- sizing and segments (b.mu held) -------------------------------------------------------------------------

func (b *buffer) refillSize(limit int64) int {
	size := math.Max(float64(b.minRefill), math.Min(float64(b.maxRefill), math.Ceil(b.rate*b.horizon)))
	if limit > 0 && size > float64(limit) {
		size = float64(limit)
	}
	return int(math.Max(1, size))
}

func (b *buffer) lowWater(limit int64) int {
	half := float64(b.refillSize(limit) / 2)
	return int(math.Max(half, math.Min(math.Ceil(b.rate*b.latency*latencyMargin), math.Ceil(b.rate*b.horizon))))
}

func (b *buffer) wantsRefill(limit int64) bool { return !b.refilling && b.queued < b.lowWater(limit) }

func (b *buffer) noteDrawn(count int, now time.Time) {
	b.windowDrawn += count
	elapsed := now.Sub(b.windowStart).Seconds()
	if elapsed >= rateWindow {
		rate := float64(b.windowDrawn) / elapsed
		if b.rate == 0 {
			b.rate = rate
		} else {
			b.rate = rateEWMA*rate + (1-rateEWMA)*b.rate
		}
		b.windowStart, b.windowDrawn = now, 0
	}
}

func (b *buffer) add(ids []string, started time.Time, latency float64) {
	b.refills++
	if b.latency == 0 {
		b.latency = latency
	} else {
		b.latency = 0.5*latency + 0.5*b.latency
	}
	var deadline time.Time
	if b.maxAge > 0 {
		deadline = started.Add(b.maxAge)
	}
	step := int(math.Max(1, math.Ceil(float64(len(ids))/segmentsPerBatch)))
	for i := 0; i < len(ids); i += step {
		end := i + step
		if end > len(ids) {
			end = len(ids)
		}
		b.queue = append(b.queue, &segment{deadline: deadline, ids: ids[i:end]})
		b.queued += end - i
	}
}

func (b *buffer) retire(now time.Time) {
	h := b.head
	b.head = nil
	b.noteDrawn(h.pos, now)
	if left := len(h.ids) - h.pos; left > 0 {
		b.rate *= expiredRateCut
	}
}

func (b *buffer) nextSegment(now time.Time) bool {
	for len(b.queue) > 0 {
		s := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.queued -= len(s.ids)
		if s.fresh(now) {
			b.head = s
			return true
		}
		b.rate *= expiredRateCut
	}
	return false
}

func (b *buffer) noteMiss() {
	if b.refills > 0 && b.boostedAt != b.generation {
		b.boostedAt = b.generation
		boosted := b.rate * missedRateBoost
		if b.rate == 0 {
			boosted = float64(b.minRefill) / math.Max(b.latency, 1e-3)
		}
		b.rate = math.Min(boosted, rateMaxPerS)
	}
}
