// Command idmint-bench measures the Go client against one idmint server for bench/bench_clients.py: "buffered"
// (NewID with refills, for a number of seconds), "hot" (NewID from a full buffer: bursts of hotBurst draws, each
// from a new client whose first draw fetched 100,000 IDs; only the draws are timed) or "single" (one request per
// ID: Unbuffered NewID). It prints one JSON line: {"client": "go", "mode", "ids", "seconds", "rate"}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	idmint "idmint/client"
)

const (
	block     = 1000
	hotBurst  = 40_000
	hotRefill = 100_000
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8000", "the server")
	scheme := flag.String("scheme", "wiji", "the scheme")
	mode := flag.String("mode", "buffered", "buffered or single")
	seconds := flag.Float64("seconds", 5, "how long to measure")
	flag.Parse()
	ctx := context.Background()
	if *mode == "hot" {
		hot(ctx, *url, *scheme, *seconds)
		return
	}
	client, err := idmint.New([]string{*url}, idmint.Options{Unbuffered: *mode == "single"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer client.Close()
	draw := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := client.NewID(ctx, *scheme); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
	step := block
	if *mode == "single" {
		step = 10
	}
	warm := time.Now().Add(time.Second)
	for time.Now().Before(warm) {
		draw(step)
	}
	count := 0
	started := time.Now()
	end := started.Add(time.Duration(*seconds * float64(time.Second)))
	for time.Now().Before(end) {
		draw(step)
		count += step
	}
	elapsed := time.Since(started).Seconds()
	out, _ := json.Marshal(map[string]any{"client": "go", "mode": *mode, "ids": count, "seconds": elapsed,
		"rate": float64(count) / elapsed})
	fmt.Println(string(out))
}

// hot times bursts of draws from a full buffer until the draws have taken seconds in all.
func hot(ctx context.Context, url, scheme string, seconds float64) {
	var timed time.Duration
	count := 0
	for timed.Seconds() < seconds {
		client, err := idmint.New([]string{url}, idmint.Options{MaxAge: idmint.NoMaxAge, MinRefill: hotRefill,
			MaxRefill: hotRefill})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := client.NewID(ctx, scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		started := time.Now()
		for i := 0; i < hotBurst; i++ {
			if _, err := client.NewID(ctx, scheme); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		timed += time.Since(started)
		count += hotBurst
		client.Close()
	}
	out, _ := json.Marshal(map[string]any{"client": "go", "mode": "hot", "ids": count, "seconds": timed.Seconds(),
		"rate": float64(count) / timed.Seconds()})
	fmt.Println(string(out))
}
