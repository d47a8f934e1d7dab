// Command idmint-conformance is the conformance runner of the Go client: one JSON command a line in on stdin, one
// JSON result a line out on stdout, as clients/conformance/README.md describes (the protocol all runners share).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"time"

	idmint "idmint/client"
)

type command struct {
	Op        string            `json:"op"`
	Replicas  []string          `json:"replicas"`
	Timeout   *float64          `json:"timeout"`
	MaxAge    *float64          `json:"max_age"`
	Buffer    *bool             `json:"buffer"`
	APIKey    string            `json:"api_key"`
	MinRefill int               `json:"min_refill"`
	MaxRefill int               `json:"max_refill"`
	Scheme    string            `json:"scheme"`
	Count     int64             `json:"count"`
	Format    string            `json:"format"`
	Options   map[string]string `json:"options"`
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Text      string            `json:"text"`
	Texts     []string          `json:"texts"`
}

type result map[string]any

func errorResult(err error, ids []string) result {
	out := result{"ok": false, "class": className(err), "message": err.Error()}
	var (
		validation   *idmint.ValidationError
		unauthorized *idmint.UnauthorizedError
		forbidden    *idmint.ForbiddenError
		scheme       *idmint.UnknownSchemeError
		sequence     *idmint.UnknownSequenceError
		public       *idmint.UnknownPublicIDError
		rejected     *idmint.RequestRejectedError
		none         *idmint.NoReplicaAvailableError
	)
	switch {
	case errors.As(err, &validation):
		out["status"] = validation.Status
	case errors.As(err, &unauthorized):
		out["status"] = unauthorized.Status
	case errors.As(err, &forbidden):
		out["status"] = forbidden.Status
	case errors.As(err, &scheme):
		out["status"] = scheme.Status
	case errors.As(err, &sequence):
		out["status"] = sequence.Status
	case errors.As(err, &public):
		out["status"] = public.Status
	case errors.As(err, &rejected):
		out["status"] = rejected.Status
	case errors.As(err, &none):
		out["reasons"], out["delivered"] = none.Reasons, none.Delivered
	}
	if ids != nil {
		out["ids"] = ids
	}
	return out
}

// className names err as a caller matches it: ErrClientClosed (errors.Is), else the client's error type in its
// chain (errors.As: "ValidationError" for a *ValidationError), else its Go type.
func className(err error) string {
	if errors.Is(err, idmint.ErrClientClosed) {
		return "ErrClientClosed"
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if t := reflect.TypeOf(e); t.Kind() == reflect.Pointer && t.Elem().PkgPath() == clientPackage {
			return t.Elem().Name()
		}
	}
	return fmt.Sprintf("%T", err)
}

// clientPackage is the import path of the client, whose error types className names.
var clientPackage = reflect.TypeOf(idmint.Rejection{}).PkgPath()

func durationOf(seconds float64) time.Duration { return time.Duration(seconds * float64(time.Second)) }

type runner struct{ client *idmint.Client }

func (r *runner) run(ctx context.Context, cmd command) result {
	if cmd.Op == "client" {
		if r.client != nil {
			r.client.Close()
		}
		opts := idmint.Options{APIKey: cmd.APIKey, MinRefill: cmd.MinRefill, MaxRefill: cmd.MaxRefill}
		if cmd.Timeout != nil {
			opts.Timeout = durationOf(*cmd.Timeout)
		}
		if cmd.MaxAge != nil {
			opts.MaxAge = durationOf(*cmd.MaxAge)
		}
		if cmd.Buffer != nil && !*cmd.Buffer {
			opts.Unbuffered = true
		}
		client, err := idmint.New(cmd.Replicas, opts)
		if err != nil {
			return result{"ok": false, "error": "bad_settings", "message": err.Error()}
		}
		r.client = client
		return result{"ok": true}
	}
	c := r.client
	var opts []idmint.IssueOption
	if cmd.Format != "" {
		opts = append(opts, idmint.WithFormat(cmd.Format))
	}
	for name, value := range cmd.Options {
		opts = append(opts, idmint.WithOption(name, value))
	}
	switch cmd.Op {
	case "ids":
		ids, err := c.IDs(ctx, cmd.Scheme, int(cmd.Count), opts...)
		if err != nil {
			return errorResult(err, nil)
		}
		return result{"ok": true, "ids": ids}
	case "stream":
		got := []string{}
		s := c.Stream(ctx, cmd.Scheme, int(cmd.Count), opts...)
		for s.Next() {
			got = append(got, s.ID())
		}
		if err := s.Err(); err != nil {
			return errorResult(err, got)
		}
		return result{"ok": true, "ids": got}
	case "new_ids":
		got := []string{}
		for i := int64(0); i < cmd.Count; i++ {
			id, err := c.NewID(ctx, cmd.Scheme, opts...)
			if err != nil {
				return errorResult(err, got)
			}
			got = append(got, id)
		}
		return result{"ok": true, "ids": got}
	case "decode":
		if cmd.Scheme != "" {
			d, err := c.DecodeAs(ctx, cmd.Scheme, cmd.ID)
			if err != nil {
				return errorResult(err, nil)
			}
			return result{"ok": true, "decoded": decoded(*d)}
		}
		found, err := c.Decode(ctx, cmd.ID)
		if err != nil {
			return errorResult(err, nil)
		}
		out := []any{}
		for _, d := range found.Candidates {
			out = append(out, decoded(d))
		}
		return result{"ok": true, "candidates": out}
	case "schemes":
		infos, err := c.Schemes(ctx)
		if err != nil {
			return errorResult(err, nil)
		}
		out := []any{}
		for _, info := range infos {
			out = append(out, map[string]any{"name": info.Name, "formats": info.Formats})
		}
		return result{"ok": true, "schemes": out}
	case "next":
		if cmd.Format == idmint.PublicFormat {
			texts, err := c.NextPublic(ctx, cmd.Name, int(cmd.Count))
			if err != nil {
				return errorResult(err, nil)
			}
			return result{"ok": true, "values": texts}
		}
		values, err := c.Next(ctx, cmd.Name, int(cmd.Count))
		if err != nil {
			return errorResult(err, nil)
		}
		texts := make([]string, len(values))
		for i, v := range values {
			texts[i] = strconv.FormatInt(v, 10)
		}
		return result{"ok": true, "values": texts}
	case "range":
		block, err := c.Range(ctx, cmd.Name, cmd.Count)
		if err != nil {
			return errorResult(err, nil)
		}
		return result{"ok": true, "first": strconv.FormatInt(block.First, 10),
			"last": strconv.FormatInt(block.Last, 10), "count": strconv.FormatInt(block.Count(), 10)}
	case "reveal":
		one, err := c.Reveal(ctx, cmd.Text)
		if err != nil {
			return errorResult(err, nil)
		}
		return result{"ok": true, "revealed": revealed(*one)}
	case "reveal_many":
		items, err := c.RevealMany(ctx, cmd.Texts)
		if err != nil {
			return errorResult(err, nil)
		}
		out := []any{}
		for _, item := range items {
			out = append(out, revealed(item))
		}
		return result{"ok": true, "items": out}
	case "close":
		c.Close()
		return result{"ok": true}
	}
	return result{"ok": false, "error": "unknown_op", "message": fmt.Sprintf("unknown op %q", cmd.Op)}
}

func decoded(d idmint.Decoded) map[string]any {
	var stamp any
	if d.TimestampText != "" {
		stamp = d.TimestampText
	}
	return map[string]any{"scheme": d.Scheme, "id": d.ID, "hex": d.Hex, "timestamp": stamp, "fields": d.Fields}
}

func revealed(r idmint.Revealed) map[string]any {
	if r.Error != "" {
		return map[string]any{"text": r.Text, "error": r.Error}
	}
	var reading any
	if r.Decoded != nil {
		reading = decoded(*r.Decoded)
	}
	return map[string]any{"text": r.Text, "id": r.ID, "scheme": r.Scheme, "key_id": r.KeyID, "decoded": reading}
}

func main() {
	r := &runner{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var cmd command
		var res result
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			res = result{"ok": false, "error": "runner_crashed", "message": err.Error()}
		} else {
			res = r.run(context.Background(), cmd)
		}
		if err := out.Encode(res); err != nil {
			os.Exit(1)
		}
	}
	if r.client != nil {
		r.client.Close()
	}
}
