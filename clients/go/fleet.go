package idmint

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// The fleet check: before a client uses a server it reads the server's GET /v1/fleet ({"fleet_id", "member",
// "region", "regions", "schemes": {name: {"kind", "slice", "pool", "group", "group_in_id"}}}), and again every
// fleetRecheck. Servers of one fleet (the same fleet_id, each confirming the other's member token through GET
// /v1/fleet/members/{token}) are one ID space. Servers of two fleets are fine when every identity pool they share
// a scheme in is disjoint, and a *FleetOverlapError otherwise. A server without the route (404: an idmint from
// before fleets) is used as before and asked again after notServedRecheck. The overlap rule is the server's
// (app/fleet.py, overlap).

const (
	fleetRecheck     = 60 * time.Second
	notServedRecheck = 10 * time.Second
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)

type fleetScheme struct {
	Kind      string          `json:"kind"`
	Pool      [2]json.Number  `json:"pool"`
	Group     json.RawMessage `json:"group"`
	GroupInID bool            `json:"group_in_id"`
}

type fleetDoc struct {
	FleetID string                 `json:"fleet_id"`
	Member  string                 `json:"member"`
	Region  json.RawMessage        `json:"region"`
	Regions json.RawMessage        `json:"regions"`
	Schemes map[string]fleetScheme `json:"schemes"`
	pools   map[string][2]int64
}

type fleetCheck struct {
	mu     sync.Mutex
	docs   map[string]*fleetDoc // nil value: the server has no /v1/fleet (404)
	readAt map[string]time.Time
}

func newFleetCheck() *fleetCheck {
	return &fleetCheck{docs: map[string]*fleetDoc{}, readAt: map[string]time.Time{}}
}

// unread names the servers whose fleet is unknown or due to be read again.
func (f *fleetCheck) unread(urls []string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var due []string
	now := time.Now()
	for _, url := range urls {
		doc, known := f.docs[url]
		ttl := fleetRecheck
		if known && doc == nil {
			ttl = notServedRecheck
		}
		if !known || now.Sub(f.readAt[url]) >= ttl {
			due = append(due, url)
		}
	}
	return due
}

func (f *fleetCheck) known(url string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.docs[url]
	return ok
}

func parseFleet(body []byte) (*fleetDoc, error) {
	var doc fleetDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("not a /v1/fleet document with a fleet ID (%v)", err)
	}
	if !uuidRE.MatchString(doc.FleetID) {
		return nil, fmt.Errorf("not a /v1/fleet document with a fleet ID (fleet_id %q)", doc.FleetID)
	}
	doc.pools = map[string][2]int64{}
	for name, entry := range doc.Schemes {
		low, err1 := entry.Pool[0].Int64()
		high, err2 := entry.Pool[1].Int64()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("not a /v1/fleet document with a fleet ID (pool bounds of %s must be integers)", name)
		}
		doc.pools[name] = [2]int64{low, high}
	}
	return &doc, nil
}

func overlap(a, b fleetScheme, aPool, bPool [2]int64) bool {
	if string(a.Group) != string(b.Group) {
		return !(a.GroupInID && b.GroupInID)
	}
	return aPool[0] <= bPool[1] && bPool[0] <= aPool[1]
}

// sameFleet names the other servers read before whose fleet ID is doc's.
func (f *fleetCheck) sameFleet(url string, doc *fleetDoc) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for other, d := range f.docs {
		if other != url && d != nil && d.FleetID == doc.FleetID {
			out = append(out, other)
		}
	}
	return out
}

// learn records url's fleet (nil: 404) and returns a *FleetOverlapError when it overlaps one read before.
// live(other) tells whether other confirms doc's member token (nil: it cannot tell).
func (f *fleetCheck) learn(url string, doc *fleetDoc, live func(other string) *bool) error {
	f.mu.Lock()
	delete(f.docs, url)
	others := map[string]*fleetDoc{}
	for k, v := range f.docs {
		others[k] = v
	}
	f.mu.Unlock()
	if doc != nil {
		for otherURL, other := range others {
			if other == nil {
				continue
			}
			if other.FleetID == doc.FleetID {
				if doc.Member == "" {
					continue
				}
				if confirmed := live(otherURL); confirmed == nil || *confirmed {
					continue // one fleet (or the server cannot tell now)
				}
			}
			for scheme, entry := range doc.Schemes {
				theirs, ok := other.Schemes[scheme]
				if ok && overlap(entry, theirs, doc.pools[scheme], other.pools[scheme]) {
					return &FleetOverlapError{
						URLs:   [2]string{url, otherURL},
						Scheme: scheme,
						text: fmt.Sprintf("%s (fleet %s, region %s of %s) and %s (fleet %s, region %s of %s) are two "+
							"fleets whose %s identities overlap (%s %d..%d and %d..%d): IDs from both could repeat; "+
							"give each fleet its own IDMINT_REGION, or use servers of one fleet",
							url, doc.FleetID, doc.Region, doc.Regions, otherURL, other.FleetID, other.Region,
							other.Regions, scheme, entry.Kind, doc.pools[scheme][0], doc.pools[scheme][1],
							other.pools[scheme][0], other.pools[scheme][1]),
					}
				}
			}
		}
	}
	f.mu.Lock()
	f.docs[url] = doc
	f.readAt[url] = time.Now()
	f.mu.Unlock()
	return nil
}

// checkOneFleet returns a *SequenceStoresDifferError unless every server of urls read so far is of one fleet.
func (f *fleetCheck) checkOneFleet(urls []string) error {
	if len(urls) < 2 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	firstURL, firstFleet := "", ""
	for _, url := range urls {
		doc, known := f.docs[url]
		if !known {
			continue
		}
		if doc == nil {
			return &SequenceStoresDifferError{URLs: [2]string{url, ""}}
		}
		if firstURL == "" {
			firstURL, firstFleet = url, doc.FleetID
		} else if doc.FleetID != firstFleet {
			return &SequenceStoresDifferError{URLs: [2]string{firstURL, url}, Fleets: [2]string{firstFleet, doc.FleetID}}
		}
	}
	return nil
}
