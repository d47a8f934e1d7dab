// Package idmint is the Go client of idmint, a networked ID-issuing service: IDs at in-process speed from a local
// buffer, failover across replicas honouring Retry-After, streams of millions with flat memory, decoding, and
// sequences of exact 64-bit integers. Standard library only; Go 1.19 or later.
//
//	client, err := idmint.New([]string{"http://idmint-1:8000", "http://idmint-2:8000"}, idmint.Options{})
//	if err != nil { ... }
//	defer client.Close()
//	orderID, err := client.NewID(ctx, "hlc-ulid")                 // from a local buffer, refilled in the background
//	batch, err := client.IDs(ctx, "wiji", 250_000)                 // split above the server's max count
//	s := client.Stream(ctx, "hlc-ulid", 10_000_000)                // flat memory; carries on from another replica
//	for s.Next() { use(s.ID()) }
//	found, err := client.Decode(ctx, orderID)                      // every scheme that accepts it, plausible first
//	numbers, err := client.Next(ctx, "invoices", 3)                // []int64, rising, never twice
//
// Every call takes a context.Context and is bounded by Options.Timeout besides. Errors are typed (errors.go): a
// request the server rejects (*ValidationError, *UnknownSchemeError, *UnknownSequenceError, *UnauthorizedError,
// *ForbiddenError)
// is returned at once; when no replica can answer, a *NoReplicaAvailableError names each replica and its reason. Every
// answer is checked before any of it is handed out: IDs must match their scheme's token pattern from GET
// /v1/schemes, no answer may hold an ID twice or an end of an earlier answer (a replaying cache), and a redirect
// is never followed; such an answer fails its replica like a dead one. The behaviour is the Python and TypeScript
// clients' too, held to one conformance suite (clients/conformance).
package idmint
