package idmint

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"sync"
)

// No ID or sequence integer handed out twice by one client, whatever a server or a proxy on the way sends (the
// rules and their memory bounds: docs/clients.md). Every answer (a batch whole, a stream chunk by chunk) is checked
// before any of it is handed out; one that breaks a rule fails its server (moved on from), and nothing of it is
// remembered:
//
//   - within one answer, nothing twice;
//   - within one answer in a form GET /v1/schemes declares rising (rising), each ID above the one before as a
//     string, across a stream's chunks too;
//   - across answers, no answer may hold the first or last ID of one of the last answersRemembered answers (or
//     stream chunks) of the same scheme, form and options;
//   - per issuing identity, rising across answers, in the forms /v1/schemes lists in rising_per_identity: each ID
//     read as an integer, its identity taken from its bits. One identity's generator never goes back (a successor
//     starts above the recorded high-water mark), so an ID inside the span (lowest to highest) of one of its
//     identity's last spansPerIdentity answers, or at or below the floor the forgotten spans leave, is refused (a
//     gap between spans passes: a concurrent answer arriving late). identitiesRemembered identities per scheme,
//     the least recently seen forgotten first;
//   - other forms: at least the last recentIDs IDs per scheme, form and options (up to twice as many: two
//     generations of sets, the older dropped whole);
//   - sequence integers: every next integer and range handed out, as merged intervals, at most
//     intervalsRemembered per sequence, the lowest forgotten first.

const (
	answersRemembered    = 1024
	spansPerIdentity     = 64
	identitiesRemembered = 4096
	recentIDs            = 1 << 16
	intervalsRemembered  = 4096
)

// u128 is an unsigned 128-bit integer (every identity scheme's IDs fit).
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }
func (a u128) and(b u128) u128  { return u128{a.hi & b.hi, a.lo & b.lo} }
func (a u128) String() string {
	if a.hi == 0 {
		return fmt.Sprintf("%#x", a.lo)
	}
	return fmt.Sprintf("%#x%016x", a.hi, a.lo)
}

// identityOrder is how one form's text reads as an integer and which bits name its issuer (a rising_per_identity
// entry of GET /v1/schemes).
type identityOrder struct {
	digits string
	table  [128]int8 // digit value; -1 not a digit; -2 stripped
	radix  uint64
	mask   u128
	fields string
}

// parseIdentityOrder reads one rising_per_identity entry; nil when it is not one this client can use (then the
// form has the recent-ID rule).
func parseIdentityOrder(raw json.RawMessage) (*identityOrder, map[string][]string) {
	var entry struct {
		Needs    map[string][]string `json:"needs"`
		Digits   string              `json:"digits"`
		Strip    string              `json:"strip"`
		Identity []struct {
			Field string `json:"field"`
			Shift int    `json:"shift"`
			Bits  int    `json:"bits"`
		} `json:"identity"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &entry) != nil || len(entry.Digits) < 2 || len(entry.Digits) > 36 ||
		len(entry.Identity) == 0 {
		return nil, nil
	}
	o := &identityOrder{digits: entry.Digits, radix: uint64(len(entry.Digits))}
	for i := range o.table {
		o.table[i] = -1
	}
	for _, c := range []byte(entry.Strip) {
		if c < 128 {
			o.table[c] = -2
		}
	}
	for i, c := range []byte(entry.Digits) {
		if c >= 128 || o.table[c] >= 0 {
			return nil, nil
		}
		o.table[c] = int8(i)
	}
	var names []string
	for _, piece := range entry.Identity {
		if piece.Shift < 0 || piece.Bits <= 0 || piece.Shift+piece.Bits > 128 {
			return nil, nil
		}
		for bit := piece.Shift; bit < piece.Shift+piece.Bits; bit++ {
			if bit >= 64 {
				o.mask.hi |= 1 << (bit - 64)
			} else {
				o.mask.lo |= 1 << bit
			}
		}
		found := false
		for _, n := range names {
			found = found || n == piece.Field
		}
		if !found {
			names = append(names, piece.Field)
		}
	}
	o.fields = strings.Join(names, "/")
	if entry.Needs == nil {
		entry.Needs = map[string][]string{}
	}
	return o, entry.Needs
}

// integer reads text; false when a character is not a digit or the value passes 128 bits.
func (o *identityOrder) integer(text string) (u128, bool) {
	var v u128
	n := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c >= 128 {
			return v, false
		}
		d := o.table[c]
		if d == -2 {
			continue
		}
		if d < 0 {
			return v, false
		}
		top, hi := bits.Mul64(v.hi, o.radix)
		carry, lo := bits.Mul64(v.lo, o.radix)
		hi, over := bits.Add64(hi, carry, 0)
		lo, c2 := bits.Add64(lo, uint64(d), 0)
		hi, over2 := bits.Add64(hi, 0, c2)
		if top != 0 || over != 0 || over2 != 0 {
			return v, false
		}
		v = u128{hi, lo}
		n++
	}
	return v, n > 0
}

// rule is what an answer is checked for: rising within it as strings, order per issuing identity across answers
// (nil: the recent-ID rule).
type rule struct {
	scheme string
	rising bool
	order  *identityOrder
}

// spans is one identity's memory: IDs at or below floor are refused, and those inside [lows[i], highs[i]].
type spans struct {
	floor      u128
	hasFloor   bool
	lows       []u128
	highs      []u128
	lastUsedAt uint64
}

func (s *spans) holds(v u128) bool {
	if s.hasFloor && !s.floor.less(v) {
		return true
	}
	if len(s.highs) == 0 || s.highs[len(s.highs)-1].less(v) {
		return false
	}
	at := sort.Search(len(s.highs), func(i int) bool { return !s.highs[i].less(v) })
	return at < len(s.lows) && !v.less(s.lows[at])
}

func (s *spans) add(low, high u128) {
	start := sort.Search(len(s.highs), func(i int) bool { return !s.highs[i].less(low) })
	end := sort.Search(len(s.lows), func(i int) bool { return high.less(s.lows[i]) })
	if start < end {
		if s.lows[start].less(low) {
			low = s.lows[start]
		}
		if high.less(s.highs[end-1]) {
			high = s.highs[end-1]
		}
	}
	s.lows = append(s.lows[:start], append([]u128{low}, s.lows[end:]...)...)
	s.highs = append(s.highs[:start], append([]u128{high}, s.highs[end:]...)...)
	if len(s.lows) > spansPerIdentity {
		s.floor, s.hasFloor = s.highs[0], true
		s.lows, s.highs = s.lows[1:], s.highs[1:]
	}
}

// intervals holds integers as disjoint merged [low, high] intervals, at most intervalsRemembered (the lowest
// forgotten first).
type intervals struct{ lows, highs []int64 }

func (s *intervals) overlap(low, high int64) (int64, int64, bool) {
	at := sort.Search(len(s.highs), func(i int) bool { return s.highs[i] >= low })
	if at < len(s.lows) && s.lows[at] <= high {
		return s.lows[at], s.highs[at], true
	}
	return 0, 0, false
}

func (s *intervals) add(low, high int64) {
	below, above := low, high
	if below > math.MinInt64 {
		below--
	}
	if above < math.MaxInt64 {
		above++
	}
	start := sort.Search(len(s.highs), func(i int) bool { return s.highs[i] >= below })
	end := sort.Search(len(s.lows), func(i int) bool { return s.lows[i] > above })
	if start < end {
		if s.lows[start] < low {
			low = s.lows[start]
		}
		if s.highs[end-1] > high {
			high = s.highs[end-1]
		}
	}
	s.lows = append(s.lows[:start], append([]int64{low}, s.lows[end:]...)...)
	s.highs = append(s.highs[:start], append([]int64{high}, s.highs[end:]...)...)
	if len(s.lows) > intervalsRemembered {
		s.lows, s.highs = s.lows[1:], s.highs[1:]
	}
}

// recent holds the last recentIDs values at least (up to twice as many): two generations of sets, the older
// dropped whole when the newer one fills.
type recent struct{ newer, older map[string]struct{} }

func (rc *recent) has(item string) bool {
	if _, ok := rc.newer[item]; ok {
		return true
	}
	_, ok := rc.older[item]
	return ok
}

type ends struct {
	seen  map[string]struct{}
	order []string
}

type repeats struct {
	mu         sync.Mutex
	ends       map[string]*ends
	identities map[string]map[u128]*spans
	recent     map[string]*recent
	sequences  map[string]*intervals
	clock      uint64 // counts answers: an identity's lastUsedAt
}

func newRepeats() *repeats {
	return &repeats{ends: map[string]*ends{}, identities: map[string]map[u128]*spans{}, recent: map[string]*recent{},
		sequences: map[string]*intervals{}}
}

// check fails when items break a rule for key (see the top of this file; after: the last line of the same
// stream's previous chunk, or ""); else it remembers them. what and first name items in the reason ("line 7").
func (r *repeats) check(key string, items []string, what string, first int, rl rule, after string) error {
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
	if rl.rising {
		if err := checkRising(items, after, what, first); err != nil {
			return err
		}
	}
	if rl.order != nil {
		commit, err := r.checkIdentities(rl.scheme, rl.order, items, what, first)
		if err != nil {
			return err
		}
		commit()
	} else {
		rc := r.recent[key]
		if rc == nil {
			rc = &recent{newer: map[string]struct{}{}}
			r.recent[key] = rc
		}
		for i, item := range items {
			if rc.has(item) {
				return failf("%s %d is %s, received before: a replayed or repeating answer", what, i+first, shown(item))
			}
		}
		for _, item := range items {
			rc.newer[item] = struct{}{}
		}
		if len(rc.newer) >= recentIDs {
			rc.older, rc.newer = rc.newer, map[string]struct{}{}
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

// checkIdentities fails when an item is inside a span of its identity received before; else it returns what
// remembers the answer's spans. Called with r.mu held.
func (r *repeats) checkIdentities(scheme string, o *identityOrder, items []string, what string, first int) (func(),
	error) {
	known := r.identities[scheme]
	if known == nil {
		known = map[u128]*spans{}
		r.identities[scheme] = known
	}
	seen := map[u128]*[2]u128{}
	for i, item := range items {
		v, ok := o.integer(item)
		if !ok {
			return nil, failf("%s %d is %s, not an integer in %q", what, i+first, shown(item), o.digits)
		}
		id := v.and(o.mask)
		if s := known[id]; s != nil && s.holds(v) {
			return nil, failf("%s %d is %s, not above an ID of its issuer (%s bits %s) received before: a replayed or "+
				"spliced answer", what, i+first, shown(item), o.fields, id)
		}
		if span := seen[id]; span == nil {
			seen[id] = &[2]u128{v, v}
		} else if v.less(span[0]) {
			span[0] = v
		} else if span[1].less(v) {
			span[1] = v
		}
	}
	return func() {
		r.clock++
		for id, span := range seen {
			s := known[id]
			if s == nil {
				s = &spans{}
				known[id] = s
			}
			s.lastUsedAt = r.clock
			s.add(span[0], span[1])
		}
		if len(known) > identitiesRemembered { // forget the least recently seen (a rare full scan)
			var oldest u128
			at := uint64(math.MaxUint64)
			for id, s := range known {
				if s.lastUsedAt < at {
					oldest, at = id, s.lastUsedAt
				}
			}
			delete(known, oldest)
		}
	}, nil
}

func (r *repeats) sequence(name string) *intervals {
	s := r.sequences[name]
	if s == nil {
		s = &intervals{}
		r.sequences[name] = s
	}
	return s
}

func (r *repeats) checkNext(name string, values []int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := r.sequence(name)
	for i, v := range values {
		if low, high, ok := held.overlap(v, v); ok {
			return failf("integer %d is %d, inside %d..%d received before: a replayed, spliced or repeating answer",
				i+1, v, low, high)
		}
	}
	for i := 0; i < len(values); {
		j := i
		for j+1 < len(values) && values[j] < math.MaxInt64 && values[j+1] == values[j]+1 {
			j++
		}
		held.add(values[i], values[j])
		i = j + 1
	}
	return nil
}

func (r *repeats) checkRange(name string, first, last int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := r.sequence(name)
	if low, high, ok := held.overlap(first, last); ok {
		return failf("range %d..%d overlaps %d..%d, received before: a replayed, spliced or repeating answer",
			first, last, low, high)
	}
	held.add(first, last)
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
