package llmgov_test

import (
	"strings"
	"testing"

	"llmgov.dev/llmgov"
)

// shape is the benchmark config of bindings-c/bench/shapes.h: depth nested
// scopes with the first dimensions limits, so large that nothing refuses.
func shape(depth, dimensions int) (config, path string) {
	var limits []string
	for _, d := range []string{"requests", "input_tokens", "output_tokens", "tokens"}[:dimensions] {
		limits = append(limits, `{"dimension":"`+d+`","amount":1125899906842624,"window":"1s"}`)
	}
	var scopes, segments []string
	for i := 0; i < depth; i++ {
		segments = append(segments, "s"+string(rune('0'+i)))
		scopes = append(scopes, `"`+strings.Join(segments, "/")+`":{"limits":[`+strings.Join(limits, ",")+`]}`)
	}
	return `{"scopes":{` + strings.Join(scopes, ",") + `}}`, strings.Join(segments, "/")
}

// BenchmarkTryAcquireSettle is the round trip from Go, cgo included:
// TryAcquire, Settle and Close, on a manual clock that stands still.
func BenchmarkTryAcquireSettle(b *testing.B) {
	for _, s := range []struct {
		name              string
		depth, dimensions int
	}{{"1x1", 1, 1}, {"6x4", 6, 4}} {
		b.Run(s.name, func(b *testing.B) {
			config, path := shape(s.depth, s.dimensions)
			gov, err := llmgov.FromJSON(config, llmgov.WithClock(llmgov.NewManualClock(0)))
			if err != nil {
				b.Fatal(err)
			}
			defer gov.Close()
			route, err := gov.Route(path)
			if err != nil {
				b.Fatal(err)
			}
			request := llmgov.Request{Route: route, InputTokens: 1200, MaxOutputTokens: 400}
			usage := llmgov.Usage{InputTokens: 1200, OutputTokens: 250}
			b.ReportAllocs()
			for b.Loop() {
				permit, err := gov.TryAcquire(request)
				if err != nil {
					b.Fatal(err)
				}
				if err := permit.Settle(usage); err != nil {
					b.Fatal(err)
				}
				permit.Close()
			}
		})
	}
}

// BenchmarkTryAcquireProfile is the round trip through a profile of three
// idle deployments (headroom ranked on each call), beside TryAcquireSettle.
func BenchmarkTryAcquireProfile(b *testing.B) {
	const huge = `[{"dimension":"requests","amount":1125899906842624,"window":"1s"},{"dimension":"tokens","amount":1125899906842624,"window":"1s"}]`
	config := `{"scopes":{"a":{"provider":true,"limits":` + huge + `},"b":{"provider":true,"limits":` + huge +
		`},"c":{"provider":true,"limits":` + huge + `}},"profiles":{"p":{"deployments":["a","b","c"]}}}`
	gov, err := llmgov.FromJSON(config, llmgov.WithClock(llmgov.NewManualClock(0)))
	if err != nil {
		b.Fatal(err)
	}
	defer gov.Close()
	profile, err := gov.Profile("p")
	if err != nil {
		b.Fatal(err)
	}
	defer profile.Close()
	request := llmgov.Request{InputTokens: 1200, MaxOutputTokens: 400}
	usage := llmgov.Usage{InputTokens: 1200, OutputTokens: 250}
	b.ReportAllocs()
	for b.Loop() {
		routed, err := gov.TryAcquireProfile(profile, request)
		if err != nil {
			b.Fatal(err)
		}
		if err := routed.Permit.Settle(usage); err != nil {
			b.Fatal(err)
		}
		routed.Permit.Close()
	}
}

// BenchmarkRefusal is a refused TryAcquire, without an event callback and
// with one (the event built as JSON in Rust, parsed in Go, handed to fn).
func BenchmarkRefusal(b *testing.B) {
	for _, hooked := range []bool{false, true} {
		name := map[bool]string{false: "no_hook", true: "hook"}[hooked]
		b.Run(name, func(b *testing.B) {
			gov, err := llmgov.FromJSON(`{"scopes":{"p":{"limits":[{"dimension":"requests","amount":1,"window":"1h"}]}}}`,
				llmgov.WithClock(llmgov.NewManualClock(0)))
			if err != nil {
				b.Fatal(err)
			}
			defer gov.Close()
			route, _ := gov.Route("p")
			held, err := gov.TryAcquire(llmgov.Request{Route: route})
			if err != nil {
				b.Fatal(err)
			}
			defer held.Close()
			events := 0
			if hooked {
				if err := gov.OnEvent(func(llmgov.Event) { events++ }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := gov.TryAcquire(llmgov.Request{Route: route}); err == nil {
					b.Fatal("admitted")
				}
			}
			if hooked && events == 0 {
				b.Fatal("no event reached the callback")
			}
		})
	}
}
