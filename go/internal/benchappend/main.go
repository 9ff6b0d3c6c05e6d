// Command benchappend measures the Go SDK's appends against raw go-redis on one server, in one
// run: a single-event append beside one XADD round trip, a 100-event append beside 100
// pipelined XADDs, and what the server spends running the append script and an XADD (INFO
// commandstats). It prints one JSON object for scripts/bench_languages.py, which runs the Python
// and TypeScript sides in the same run and prints the ratios.
//
//	go run ./internal/benchappend redis://127.0.0.1:PORT/0 [seconds per measure]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(argv []string) error {
	url, seconds := "redis://127.0.0.1:6379/0", 2.0
	if len(argv) > 0 {
		url = argv[0]
	}
	if len(argv) > 1 {
		parsed, err := strconv.ParseFloat(argv[1], 64)
		if err != nil {
			return fmt.Errorf("seconds per measure: %w", err)
		}
		seconds = parsed
	}
	budget := time.Duration(seconds * float64(time.Second))
	ctx := context.Background()
	options, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	raw := redis.NewClient(options)
	defer raw.Close()
	ledger, err := ledgerbus.Connect(ctx, url, ledgerbus.WithPrefix(fmt.Sprintf("benchgo%d", time.Now().UnixNano())))
	if err != nil {
		return err
	}
	defer ledger.Close()
	w := newWorkload(raw, ledger, "bench-go")

	out := map[string]float64{}
	measures := []struct {
		name string
		op   func(int) error
	}{
		{"raw_xadd", func(int) error { return w.rawXAdd(ctx) }},
		{"append_1", func(i int) error { return w.append1(ctx, i) }},
		{"raw_xadd_100", func(int) error { return w.rawXAdd100(ctx) }},
		{"append_100", func(int) error { return w.append100(ctx) }},
	}
	for _, m := range measures {
		if out[m.name], err = rate(ctx, budget, m.op); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	// What the server itself spends: the append script per single-event call, and an XADD.
	if out["script_us"], out["xadd_us"], err = serverTimes(ctx, raw, w); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// serverTimes is the microseconds the server spends per single-event append script and per
// XADD, from INFO commandstats after a thousand of each.
func serverTimes(ctx context.Context, raw *redis.Client, w *workload) (script, xadd float64, err error) {
	if err = raw.ConfigResetStat(ctx).Err(); err != nil {
		return 0, 0, err
	}
	for i := range 1000 {
		if err = w.append1(ctx, 1_000_000+i); err != nil {
			return 0, 0, err
		}
		if err = w.rawXAdd(ctx); err != nil {
			return 0, 0, err
		}
	}
	stats, err := raw.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	commands := stats["Commandstats"]
	return usecPerCall(commands["cmdstat_evalsha"]), usecPerCall(commands["cmdstat_xadd"]), nil
}

// usecPerCall reads usec_per_call out of a commandstats line
// ("calls=1000,usec=9000,usec_per_call=9.00,..."); 0 when it is not there.
func usecPerCall(line string) float64 {
	for _, part := range strings.Split(line, ",") {
		if value, ok := strings.CutPrefix(part, "usec_per_call="); ok {
			parsed, _ := strconv.ParseFloat(value, 64)
			return parsed
		}
	}
	return 0
}
