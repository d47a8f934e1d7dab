package idmint

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// The error types of the client, one per case (match them with errors.As; ErrClientClosed with errors.Is). The
// Python and TypeScript clients name each alike (docs/clients.md, "Errors"):
//
//	*ValidationError            422: Detail names the rule broken (count range, option, format, ID)
//	*UnauthorizedError          401: the API key is missing or matches none
//	*ForbiddenError             403: the API key lacks the route's scope
//	*UnknownSchemeError         404 to an ID or decode call: no scheme of that name
//	*UnknownSequenceError       404 to a sequence call: no sequence of that name
//	*UnknownPublicIDError       404 to Reveal: no public-ID key in force opens the text
//	*RequestRejectedError       any other 4xx but 429 (the six above embed its Rejection)
//	*NoReplicaAvailableError    every replica refused (503/429 + Retry-After) or failed (unreachable, 5xx,
//	                            a redirect, a broken, truncated or repeating answer); Reasons per replica URL
//	*FleetOverlapError          two servers of fleets whose identities overlap: IDs from both could repeat
//	*SequenceStoresDifferError  a sequence call with servers of two fleets (each keeps its own sequences)
//	ErrClientClosed             the client was closed
//
// A rejection (4xx) is the request's fault and is never retried on another replica.

// ErrClientClosed is returned by every call on a closed client.
var ErrClientClosed = errors.New("idmint: client is closed")

// ErrNotConstructed is returned by every call on a zero Client: make clients with New.
var ErrNotConstructed = errors.New("idmint: a zero Client has no replicas: make one with idmint.New")

// Rejection is what every 4xx error holds: the HTTP status, the server's detail and the request URL.
type Rejection struct {
	Status int
	Detail string
	URL    string
}

func (r Rejection) message() string { return fmt.Sprintf("%d from %s: %s", r.Status, r.URL, r.Detail) }

// RequestRejectedError is a 4xx (other than 401, 403, 404, 422 and 429): the request itself is wrong.
type RequestRejectedError struct{ Rejection }

func (e *RequestRejectedError) Error() string { return e.message() }

// ValidationError is a 422: Detail names the rule broken ("count must be in 1..100000").
type ValidationError struct{ Rejection }

func (e *ValidationError) Error() string { return e.message() }

// UnknownSchemeError is a 404 to an ID or decode call: the server has no scheme of that name.
type UnknownSchemeError struct{ Rejection }

func (e *UnknownSchemeError) Error() string { return e.message() }

// UnknownSequenceError is a 404 to a sequence call: the fleet has no sequence of that name (create it first:
// POST /v1/sequences or idmint sequence create).
type UnknownSequenceError struct{ Rejection }

func (e *UnknownSequenceError) Error() string { return e.message() }

// UnknownPublicIDError is a 404 to Reveal: no public-ID key in force on the server opens the text (not a public
// ID of this fleet, a mistyped one, or one of a key removed since).
type UnknownPublicIDError struct{ Rejection }

func (e *UnknownPublicIDError) Error() string { return e.message() }

// UnauthorizedError is a 401: the API key is missing or matches none.
type UnauthorizedError struct{ Rejection }

func (e *UnauthorizedError) Error() string { return e.message() }

// ForbiddenError is a 403: the API key is valid but lacks the scope of the route called.
type ForbiddenError struct{ Rejection }

func (e *ForbiddenError) Error() string { return e.message() }

// BadRequestError is the earlier name of ValidationError.
//
// Deprecated: use ValidationError.
type BadRequestError = ValidationError

// NoReplicaError is the earlier name of NoReplicaAvailableError.
//
// Deprecated: use NoReplicaAvailableError.
type NoReplicaError = NoReplicaAvailableError

// NoReplicaAvailableError says that every replica refused or failed. Reasons maps each replica's base URL to why
// it was not used; Delivered is how many IDs a stream had handed out when it gave up (0 for other calls).
type NoReplicaAvailableError struct {
	What      string
	Reasons   map[string]string
	Delivered int
	order     []string
	cause     error // the caller's context's error when its own deadline cut the call
}

// Unwrap is the caller's context's error (context.DeadlineExceeded) when the caller's own deadline cut the call,
// so errors.Is(err, context.DeadlineExceeded) holds; nil otherwise (the client's Timeout passing is not it).
func (e *NoReplicaAvailableError) Unwrap() error { return e.cause }

func (e *NoReplicaAvailableError) Error() string {
	urls := e.order
	if len(urls) == 0 {
		for url := range e.Reasons {
			urls = append(urls, url)
		}
		sort.Strings(urls)
	}
	parts := make([]string, 0, len(urls))
	for _, url := range urls {
		parts = append(parts, url+": "+e.Reasons[url])
	}
	return fmt.Sprintf("%s: no replica available (%s)", e.What, strings.Join(parts, "; "))
}

// FleetOverlapError says that two servers given to the client belong to different fleets whose identity pools
// overlap for Scheme (both could issue the same IDs). Give each fleet its own IDMINT_REGION, or give the client
// servers of one fleet.
type FleetOverlapError struct {
	URLs   [2]string
	Scheme string
	text   string
}

func (e *FleetOverlapError) Error() string { return e.text }

// SequenceStoresDifferError says that a sequence call was made with servers that do not share one fleet's storage
// (each fleet counts its own sequences, so integers from both would repeat). URLs[1] is "" when URLs[0] does not
// tell its fleet at all.
type SequenceStoresDifferError struct {
	URLs   [2]string
	Fleets [2]string
}

func (e *SequenceStoresDifferError) Error() string {
	if e.URLs[1] == "" {
		return fmt.Sprintf("%s does not tell its fleet (no /v1/fleet): with several servers, sequence integers from "+
			"it and the others could repeat; use servers that tell their fleet", e.URLs[0])
	}
	return fmt.Sprintf("%s (fleet %s) and %s (fleet %s) keep separate sequences: their integers would repeat; use "+
		"servers of one fleet for sequences", e.URLs[0], e.Fleets[0], e.URLs[1], e.Fleets[1])
}

// refused is internal: a replica answered 503 or 429; keep it out for retryAfter seconds.
type refused struct {
	reason     string
	retryAfter float64
}

func (e *refused) Error() string { return e.reason }

// failed is internal: a replica could not be reached or gave a broken answer; move on.
type failed struct{ reason string }

func (e *failed) Error() string { return e.reason }

func failf(format string, args ...any) error { return &failed{fmt.Sprintf(format, args...)} }
