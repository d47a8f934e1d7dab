package idmint

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func snowflakeHex(worker, unit, sequence uint64) string {
	return fmt.Sprintf("%016x", unit<<22|worker<<12|sequence)
}

func TestAnAnswerLedByAnEarlierMiddleIDFailsPerIssuingIdentity(t *testing.T) {
	entry := json.RawMessage(`{"needs": {}, "digits": "0123456789abcdef", "strip": "",
		"identity": [{"field": "worker_id", "shift": 12, "bits": 10}]}`)
	order, needs := parseIdentityOrder(entry)
	if order == nil || len(needs) != 0 {
		t.Fatal("the entry is not read")
	}
	rl := rule{scheme: "snowflake", order: order}
	r := newRepeats()
	steps := []struct {
		ids []string
		ok  bool
	}{
		{[]string{snowflakeHex(5, 100, 0), snowflakeHex(5, 101, 0), snowflakeHex(5, 102, 0)}, true},
		{[]string{snowflakeHex(5, 101, 0), snowflakeHex(5, 130, 0), snowflakeHex(5, 131, 0)}, false}, // [b, x, y]
		{[]string{snowflakeHex(6, 90, 0), snowflakeHex(5, 140, 0)}, true},                            // another worker
		{[]string{snowflakeHex(5, 120, 0)}, true},                                                    // a late answer
		{[]string{snowflakeHex(5, 120, 0)}, false},                                                   // again
	}
	for i, step := range steps {
		err := r.check("k", step.ids, "ID", 1, rl, "")
		if (err == nil) != step.ok {
			t.Fatalf("step %d: %v", i, err)
		}
		if err != nil && !strings.Contains(err.Error(), "received before") {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

func TestIntegersOf128BitsAndSequenceIntervals(t *testing.T) {
	order, _ := parseIdentityOrder(json.RawMessage(`{"digits": "0123456789ABCDEFGHJKMNPQRSTVWXYZ", "strip": "",
		"identity": [{"field": "publisher_id", "shift": 48, "bits": 16}]}`))
	v, ok := order.integer("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	if !ok || v.hi != ^uint64(0) || v.lo != ^uint64(0) {
		t.Fatalf("2**128-1: %v %v", v, ok)
	}
	if _, ok := order.integer("80000000000000000000000000"); ok {
		t.Fatal("2**128 read")
	}
	r := newRepeats()
	if err := r.checkNext("s", []int64{1010, 1011, 1012}); err != nil {
		t.Fatal(err)
	}
	if err := r.checkNext("s", []int64{1011, 1031, 1032}); err == nil {
		t.Fatal("1011 handed out twice")
	}
	if err := r.checkRange("s", 1012, 1020); err == nil {
		t.Fatal("a range over 1012")
	}
	if err := r.checkRange("s", 1013, 1020); err != nil {
		t.Fatal(err)
	}
}
