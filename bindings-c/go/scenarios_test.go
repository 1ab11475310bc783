package llmgov_test

// Replays the language-neutral conformance scenarios in tests/scenarios/
// (format: tests/scenarios/README.md; reference runner:
// core/tests/scenarios.rs) through the Go package and the C library.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// minScenarios is what the bindings are promised; fewer means files went
// missing.
const minScenarios = 15

var scenarioDir = filepath.Join("..", "..", "tests", "scenarios")

// The fields each op takes, and which of them are required: a step with
// any other field, or without a required one, is malformed.
var stepFields = map[string]struct{ required, optional []string }{
	"advance": {[]string{"ms"}, nil},
	"acquire": {[]string{"paths", "expect"},
		[]string{"permit", "input_tokens", "cached_input_tokens", "max_output_tokens", "expected_output_tokens"}},
	"settle":          {[]string{"permit"}, []string{"input_tokens", "cached_input_tokens", "output_tokens", "expect"}},
	"cancel":          {[]string{"permit"}, []string{"expect"}},
	"add_output":      {[]string{"permit", "tokens"}, []string{"expect"}},
	"expect_limit":    {[]string{"scope", "dimension"}, []string{"limit", "available", "in_use", "reserved", "used", "expired"}},
	"expect_counters": {nil, []string{"admitted", "rate_limited", "never_fits", "expired_permits"}},
}

var dimensionNames = map[string]bool{
	"requests": true, "input_tokens": true, "output_tokens": true, "tokens": true, "concurrency": true, "cost": true,
}

// fields is one JSON object, read strictly.
type fields map[string]json.RawMessage

// object reads a JSON object whose keys are all in allowed, with every
// required key present.
func object(raw json.RawMessage, required, optional []string) (fields, error) {
	var f fields
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return nil, fmt.Errorf("not a JSON object: %s", raw)
	}
	known := map[string]bool{}
	for _, k := range append(append([]string{}, required...), optional...) {
		known[k] = true
	}
	for k := range f {
		if !known[k] {
			return nil, fmt.Errorf("unknown field `%s`", k)
		}
	}
	for _, k := range required {
		if _, ok := f[k]; !ok {
			return nil, fmt.Errorf("missing field `%s`", k)
		}
	}
	return f, nil
}

// get decodes field k into *out (an exact type: uint64 refuses -1 and
// 1.5); a missing field leaves *out as it is.
func get[T any](f fields, k string, out *T) error {
	raw, ok := f[k]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("field `%s`: %v", k, err)
	}
	return nil
}

// covers checks that every field stated (bar the selectors) equals the
// same field of actual, as JSON values.
func covers(stated fields, actual map[string]any, selectors ...string) error {
	want, got := map[string]any{}, map[string]any{}
	for k, raw := range stated {
		if contains(selectors, k) {
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		want[k] = v
		// Round-trip the actual value so both sides are JSON values.
		a, present := actual[k]
		if !present {
			got[k] = "<absent>"
			continue
		}
		text, _ := json.Marshal(a)
		var back any
		_ = json.Unmarshal(text, &back)
		got[k] = back
	}
	if !reflect.DeepEqual(want, got) {
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(actual)
		return fmt.Errorf("expected %s, got %s", w, g)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// outcome is a call's result in the scenario vocabulary.
func outcome(err error, success string) map[string]any {
	if err == nil {
		return map[string]any{"outcome": success}
	}
	var e *llmgov.Error
	if !errors.As(err, &e) {
		return map[string]any{"outcome": "error", "code": err.Error()}
	}
	switch {
	case errors.Is(err, llmgov.ErrRateLimited):
		var retry any // null: the refusal waits on a release, not on time
		if e.HasRetryAfter {
			retry = e.RetryAfterMillis()
		}
		return map[string]any{"outcome": "rate_limited", "scope": e.Scope, "dimension": string(e.Dimension),
			"retry_after_ms": retry}
	case errors.Is(err, llmgov.ErrNeverFits):
		return map[string]any{"outcome": "never_fits", "scope": e.Scope, "dimension": string(e.Dimension)}
	default:
		return map[string]any{"outcome": "error", "code": e.CodeName}
	}
}

// run is one scenario's world: its own clock at 0, governor and permits.
type run struct {
	clock   *llmgov.ManualClock
	gov     *llmgov.Governor
	permits map[string]*llmgov.Permit
}

// expectation reads a step's `expect` (default {"outcome": "ok"}).
func expectation(f fields, admitted bool) (fields, error) {
	raw, ok := f["expect"]
	if !ok {
		raw = json.RawMessage(`{"outcome":"ok"}`)
	}
	e, err := object(raw, []string{"outcome"}, []string{"code", "scope", "dimension", "retry_after_ms"})
	if err != nil {
		return nil, fmt.Errorf("expect: %v", err)
	}
	var outcome string
	if err := get(e, "outcome", &outcome); err != nil {
		return nil, err
	}
	if _, has := e["code"]; outcome == "error" && !has {
		return nil, errors.New("an expected error must give its code")
	}
	if _, named := f["permit"]; admitted && outcome == "admitted" && !named {
		return nil, errors.New("an acquire expected to be admitted must name its permit")
	}
	return e, nil
}

func (r *run) permit(f fields) (*llmgov.Permit, error) {
	var name string
	if err := get(f, "permit", &name); err != nil {
		return nil, err
	}
	p, ok := r.permits[name]
	if !ok {
		return nil, fmt.Errorf("no admitted permit named `%s`", name)
	}
	return p, nil
}

func (r *run) step(raw json.RawMessage) error {
	var head struct {
		Op *string `json:"op"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.Op == nil {
		return fmt.Errorf("malformed step: no op")
	}
	spec, ok := stepFields[*head.Op]
	if !ok {
		return fmt.Errorf("malformed step: unknown op `%s`", *head.Op)
	}
	f, err := object(raw, append([]string{"op"}, spec.required...), spec.optional)
	if err != nil {
		return fmt.Errorf("malformed step: %v", err)
	}
	switch *head.Op {
	case "advance":
		var ms uint64
		if err := get(f, "ms", &ms); err != nil {
			return err
		}
		return r.clock.Advance(time.Duration(ms) * time.Millisecond)
	case "acquire":
		return r.acquire(f)
	case "settle", "cancel", "add_output":
		return r.reconcile(*head.Op, f)
	case "expect_limit":
		return r.expectLimit(f)
	default: // expect_counters
		snapshot, err := r.snapshot()
		if err != nil {
			return err
		}
		for k := range f {
			var n uint64
			if k == "op" {
				continue
			}
			if err := get(f, k, &n); err != nil {
				return err
			}
		}
		return covers(f, snapshot, "op", "scopes")
	}
}

func (r *run) acquire(f fields) error {
	expect, err := expectation(f, true)
	if err != nil {
		return err
	}
	var (
		name     string
		paths    []string
		expected *uint64
		req      llmgov.Request
	)
	for k, out := range map[string]*uint64{"input_tokens": &req.InputTokens,
		"cached_input_tokens": &req.CachedInputTokens, "max_output_tokens": &req.MaxOutputTokens} {
		if err := get(f, k, out); err != nil {
			return err
		}
	}
	if err := errors.Join(get(f, "permit", &name), get(f, "paths", &paths),
		get(f, "expected_output_tokens", &expected)); err != nil {
		return err
	}
	if _, used := r.permits[name]; used && name != "" {
		return fmt.Errorf("permit name `%s` is used twice in this scenario", name)
	}
	req.ExpectedOutputTokens = expected
	route, err := r.gov.Route(paths...)
	var permit *llmgov.Permit
	if err == nil {
		req.Route = route
		permit, err = r.gov.TryAcquire(req)
	}
	if err == nil && name != "" {
		r.permits[name] = permit
	}
	return covers(expect, outcome(err, "admitted"))
}

func (r *run) reconcile(op string, f fields) error {
	expect, err := expectation(f, false)
	if err != nil {
		return err
	}
	p, err := r.permit(f)
	if err != nil {
		return err
	}
	switch op {
	case "settle":
		var u llmgov.Usage
		if err := errors.Join(get(f, "input_tokens", &u.InputTokens), get(f, "cached_input_tokens",
			&u.CachedInputTokens), get(f, "output_tokens", &u.OutputTokens)); err != nil {
			return err
		}
		err = p.Settle(u)
	case "cancel":
		err = p.Cancel()
	default:
		var tokens uint64
		if err := get(f, "tokens", &tokens); err != nil {
			return err
		}
		err = p.AddOutput(tokens)
	}
	return covers(expect, outcome(err, "ok"))
}

// snapshot is the governor's snapshot as generic JSON, to compare with
// exactly what the core reports.
func (r *run) snapshot() (map[string]any, error) {
	text, err := r.gov.SnapshotJSON()
	if err != nil {
		return nil, err
	}
	var s map[string]any
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	return s, dec.Decode(&s)
}

// expectLimit reads the limit from the snapshot, which (unlike interning
// the path) never creates a template scope.
func (r *run) expectLimit(f fields) error {
	var (
		scope, dimension string
		index            *int
	)
	if err := errors.Join(get(f, "scope", &scope), get(f, "dimension", &dimension), get(f, "limit", &index)); err != nil {
		return err
	}
	for _, k := range []string{"available"} {
		var n int64
		if err := get(f, k, &n); err != nil {
			return err
		}
	}
	for _, k := range []string{"in_use", "reserved", "used", "expired"} {
		var n uint64
		if err := get(f, k, &n); err != nil {
			return err
		}
	}
	if !dimensionNames[dimension] {
		return fmt.Errorf("malformed step: unknown dimension `%s`", dimension)
	}
	snapshot, err := r.snapshot()
	if err != nil {
		return err
	}
	var known []string
	for _, s := range snapshot["scopes"].([]any) {
		s := s.(map[string]any)
		known = append(known, s["path"].(string))
		if s["path"] != scope {
			continue
		}
		limits := s["limits"].([]any)
		for i, l := range limits {
			l := l.(map[string]any)
			if index != nil && *index != i {
				continue
			}
			if l["dimension"] == dimension {
				return covers(f, l, "op", "scope", "dimension", "limit")
			}
			if index != nil {
				break // the limit at that index counts another dimension
			}
		}
		return fmt.Errorf("scope `%s` has no %s limit at %v", scope, dimension, index)
	}
	return fmt.Errorf("no scope `%s` instantiated; known: %v", scope, known)
}

// replay runs one file: its step count, or the first failure (later steps
// depend on the state an earlier failure left wrong).
func replay(path string) (int, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	top, err := object(text, []string{"name", "description", "config", "steps"}, nil)
	if err != nil {
		return 0, fmt.Errorf("not a scenario: %v", err)
	}
	var (
		name, description string
		steps             []json.RawMessage
	)
	if err := errors.Join(get(top, "name", &name), get(top, "description", &description),
		get(top, "steps", &steps)); err != nil {
		return 0, err
	}
	if want := strings.TrimSuffix(filepath.Base(path), ".json"); name != want {
		return 0, fmt.Errorf("name `%s` differs from the file name", name)
	}
	if strings.TrimSpace(description) == "" {
		return 0, errors.New("description is empty")
	}
	clock := llmgov.NewManualClock(0)
	defer clock.Close()
	gov, err := llmgov.FromJSON(string(top["config"]), llmgov.WithClock(clock))
	if err != nil {
		return 0, fmt.Errorf("config: %v", err)
	}
	defer gov.Close()
	r := &run{clock: clock, gov: gov, permits: map[string]*llmgov.Permit{}}
	defer func() {
		for _, p := range r.permits {
			p.Close()
		}
	}()
	for i, step := range steps {
		if err := r.step(step); err != nil {
			return i, fmt.Errorf("steps[%d] %s: %v", i, step, err)
		}
	}
	return len(steps), nil
}

func TestConformanceScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	steps := 0
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			n, err := replay(file)
			steps += n
			if err != nil {
				t.Errorf("tests/scenarios/%s: %v", filepath.Base(file), err)
			}
		})
	}
	t.Logf("replayed %d scenarios (%d steps)", len(files), steps)
	if len(files) < minScenarios {
		t.Fatalf("found %d scenario files in %s, expected at least %d", len(files), scenarioDir, minScenarios)
	}
}

// The runner fails what it should: a wrong expectation, a typo'd field, an
// unknown op, a missing required field.
func TestRunnerRejectsWrongAndMalformedScenarios(t *testing.T) {
	config := `{"scopes":{"a":{"limits":[{"dimension":"requests","amount":1,"window":"1m"}]}}}`
	cases := map[string]string{
		"wrong outcome":       `{"op":"acquire","permit":"a","paths":["a"],"expect":{"outcome":"rate_limited"}}`,
		"typo in a field":     `{"op":"acquire","permit":"a","paths":["a"],"input_tokns":5,"expect":{"outcome":"admitted"}}`,
		"unknown op":          `{"op":"acquire_all","paths":["a"]}`,
		"missing expect":      `{"op":"acquire","permit":"a","paths":["a"]}`,
		"negative tokens":     `{"op":"acquire","permit":"a","paths":["a"],"input_tokens":-1,"expect":{"outcome":"admitted"}}`,
		"admitted unnamed":    `{"op":"acquire","paths":["a"],"expect":{"outcome":"admitted"}}`,
		"error without code":  `{"op":"acquire","paths":["b"],"expect":{"outcome":"error"}}`,
		"unknown permit":      `{"op":"settle","permit":"zz"}`,
		"wrong available":     `{"op":"expect_limit","scope":"a","dimension":"requests","available":0}`,
		"expired on a bucket": `{"op":"expect_limit","scope":"a","dimension":"requests","expired":0}`,
		"unknown scope":       `{"op":"expect_limit","scope":"b","dimension":"requests"}`,
		"unknown dimension":   `{"op":"expect_limit","scope":"a","dimension":"tokenz"}`,
		"wrong counter":       `{"op":"expect_counters","admitted":1}`,
	}
	dir := t.TempDir()
	for name, step := range cases {
		file := filepath.Join(dir, "case.json")
		text := fmt.Sprintf(`{"name":"case","description":"d","config":%s,"steps":[%s]}`, config, step)
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := replay(file); err == nil {
			t.Errorf("%s: replayed without failing", name)
		}
	}
	// And the same file with a right expectation passes.
	file := filepath.Join(dir, "case.json")
	good := fmt.Sprintf(`{"name":"case","description":"d","config":%s,"steps":[
		{"op":"acquire","permit":"a","paths":["a"],"expect":{"outcome":"admitted"}},
		{"op":"expect_limit","scope":"a","dimension":"requests","available":0,"in_use":1},
		{"op":"expect_counters","admitted":1,"rate_limited":0}]}`, config)
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := replay(file); err != nil {
		t.Errorf("a right scenario failed: %v", err)
	}
}
