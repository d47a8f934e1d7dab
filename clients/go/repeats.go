package idmint

import (
	"fmt"
	"sort"
	"sync"
)

// No ID or sequence integer handed out twice, whatever a server or a proxy on the way sends. Three rules, checked
// before any of an answer is handed out; an answer that breaks one fails its server (moved on from):
//
//   - within one answer, nothing twice (a batch whole, a stream chunk by chunk; a next answer must rise);
//   - within one answer in a form GET /v1/schemes declares rising (rising: the form, and the options it needs),
//     each ID above the one before, across a stream's chunks too: a proxy keeping an old answer's middle IDs
//     between fresh ends breaks the order;
//   - across answers, no answer may hold the first or last ID of one of the last answersRemembered answers (or
//     stream chunks) of the same scheme, form and options: a cache replaying a batch or a proxy splicing an old
//     answer into a new one repeats those. A range answer may not overlap a range received before.
//
// The order is checked within one answer only (one server request: one generator), never across answers: one URL
// often reaches several generators (a load balancer in front of replicas, idmint serve --workers N), whose IDs do
// not rise among themselves.

const answersRemembered = 1024

type ends struct {
	seen  map[string]struct{}
	order []string
}

type repeats struct {
	mu     sync.Mutex
	ends   map[string]*ends
	ranges map[string][][2]int64
}

func newRepeats() *repeats {
	return &repeats{ends: map[string]*ends{}, ranges: map[string][][2]int64{}}
}

// check fails when items hold one twice, an end of an earlier answer for key or, when rising, do not strictly rise
// (the first above after, unless after is "": the last line of the same stream's previous chunk); else it remembers
// their ends. what and first name items in the reason ("line 7").
func (r *repeats) check(key string, items []string, what string, first int, rising bool, after string) error {
	if len(items) == 0 {
		return nil
	}
	index := make(map[string]int, len(items))
	for i, item := range items {
		if at, ok := index[item]; ok {
			return failf("answer holds %s twice (%ss %d and %d): an ID is never issued twice",
				shown(item), what, at+first, i+first)
		}
		index[item] = i
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.ends[key]
	if e == nil {
		e = &ends{seen: map[string]struct{}{}}
		r.ends[key] = e
	}
	if len(e.seen) > 0 {
		for end := range e.seen {
			if i, ok := index[end]; ok {
				return failf("%s %d is %s, received before: a replayed or repeating answer", what, i+first, shown(end))
			}
		}
	}
	if rising {
		if err := checkRising(items, after, what, first); err != nil {
			return err
		}
	}
	for _, end := range [2]string{items[0], items[len(items)-1]} {
		if _, ok := e.seen[end]; !ok {
			e.seen[end] = struct{}{}
			e.order = append(e.order, end)
		}
	}
	for len(e.order) > 2*answersRemembered {
		delete(e.seen, e.order[0])
		e.order = e.order[1:]
	}
	return nil
}

func (r *repeats) checkNext(name string, values []int64) error {
	r.mu.Lock()
	for _, rg := range r.ranges[name] {
		if len(values) > 0 && rg[0] <= values[len(values)-1] && values[0] <= rg[1] {
			at := sort.Search(len(values), func(i int) bool { return values[i] >= rg[0] })
			if at < len(values) && values[at] <= rg[1] {
				r.mu.Unlock()
				return failf("integer %d is %d, inside the range %d..%d received before: a replayed or repeating answer",
					at+1, values[at], rg[0], rg[1])
			}
		}
	}
	r.mu.Unlock()
	texts := make([]string, len(values))
	for i, v := range values {
		texts[i] = fmt.Sprint(v)
	}
	return r.check(sequenceScope+name, texts, "integer", 1, false, "")
}

func (r *repeats) checkRange(name string, first, last int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rg := range r.ranges[name] {
		if first <= rg[1] && rg[0] <= last {
			return failf("range %d..%d overlaps %d..%d, received before: a replayed or repeating answer",
				first, last, rg[0], rg[1])
		}
	}
	if e := r.ends[sequenceScope+name]; e != nil {
		for _, end := range e.order {
			var v int64
			if _, err := fmt.Sscan(end, &v); err == nil && first <= v && v <= last {
				return failf("range %d..%d holds %d, received before: a replayed or repeating answer", first, last, v)
			}
		}
	}
	r.ranges[name] = append(r.ranges[name], [2]int64{first, last})
	if len(r.ranges[name]) > answersRemembered {
		r.ranges[name] = r.ranges[name][1:]
	}
	return nil
}

// checkRising fails unless items strictly rise as strings (byte order), the first above after (unless it is "").
func checkRising(items []string, after, what string, first int) error {
	previous := after
	for i, item := range items {
		if previous != "" && !(previous < item) {
			return failf("%s %d is %s, not above %s: one answer of this form rises, so this one was spliced or replayed",
				what, i+first, shown(item), shown(previous))
		}
		previous = item
	}
	return nil
}
