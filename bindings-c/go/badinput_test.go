package llmgov_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"llmgov.dev/llmgov"
)

// wantArgError fails unless err is an *llmgov.Error with code, naming
// field, whose value and message contain value.
func wantArgError(t *testing.T, what string, err error, code llmgov.Code, field, value string) {
	t.Helper()
	var e *llmgov.Error
	if !errors.As(err, &e) {
		t.Errorf("%s: want an *llmgov.Error, got %T %v", what, err, err)
		return
	}
	if e.Code != code || !errors.Is(err, code) || e.Field != field || !strings.Contains(e.Value, value) ||
		!strings.Contains(e.Message, field) || !strings.Contains(e.Message, value) {
		t.Errorf("%s: want %s naming %q = %q, got %s %q = %q: %s", what, code.Name(), field, value,
			e.CodeName, e.Field, e.Value, e.Message)
	}
}

func TestStringsWithNULAreRefusedNotCutShort(t *testing.T) {
	gov, _ := newGovernor(t)
	_, err := llmgov.FromPreset("openai-gpt-4o-tier1\x00garbage")
	wantArgError(t, "FromPreset", err, llmgov.ErrInvalidArg, "name", `openai-gpt-4o-tier1\x00garbage`)
	_, err = llmgov.FromJSON("{}\x00{{{{")
	wantArgError(t, "FromJSON", err, llmgov.ErrInvalidArg, "json", `{}\x00{{{{`)
	_, err = llmgov.FromTOML("[scopes.\"a\"]\nlimits = []\n\x00 not TOML [[[")
	wantArgError(t, "FromTOML", err, llmgov.ErrInvalidArg, "toml", `\x00 not TOML [[[`)
	_, err = gov.Route("tenants/a", "openai/org/gpt-4o\x00/does-not-exist")
	wantArgError(t, "Route", err, llmgov.ErrInvalidArg, "paths[1]", `openai/org/gpt-4o\x00/does-not-exist`)
	_, err = gov.Route("tenants/acme\x00evil")
	wantArgError(t, "Route of a tenant", err, llmgov.ErrInvalidArg, "paths[0]", `tenants/acme\x00evil`)
	_, err = gov.Class("batch\x00x")
	wantArgError(t, "Class", err, llmgov.ErrInvalidArg, "name", `batch\x00x`)
	_, err = gov.Scope("tenants/a\x00b")
	wantArgError(t, "Scope", err, llmgov.ErrInvalidArg, "path", `tenants/a\x00b`)
	_, err = llmgov.CountTokensForModel("gpt-4\x00o", "hello")
	wantArgError(t, "CountTokensForModel", err, llmgov.ErrInvalidArg, "model", `gpt-4\x00o`)

	routing, _ := routingGovernor(t)
	_, err = routing.Profile("gpt-4o\x00x")
	wantArgError(t, "Profile", err, llmgov.ErrInvalidArg, "name", `gpt-4o\x00x`)
	_, err = routing.Profile("gpt-4o", "tenants/a", "tenants/b\x00")
	wantArgError(t, "Profile's consumer paths", err, llmgov.ErrInvalidArg, "consumer_paths[1]", `tenants/b\x00`)

	// Nothing was charged to the prefix: the tenant's scope was never made.
	snapshot := must[*llmgov.Snapshot](t)(gov.Snapshot())
	for _, s := range snapshot.Scopes {
		if s.Path == "tenants/acme" {
			t.Errorf("tenants/acme was made from a path cut at its NUL")
		}
	}

	// Text passed with its length keeps its NULs: they are counted.
	withNUL := must[uint64](t)(llmgov.CountTokensForModel("gpt-4o", "hello\x00world"))
	without := must[uint64](t)(llmgov.CountTokensForModel("gpt-4o", "hello"))
	if withNUL <= without {
		t.Errorf("the text after a NUL was not counted: %d against %d", withNUL, without)
	}
}

func TestALongConfigShowsWhereItsNULIs(t *testing.T) {
	config := strings.Repeat("# padding\n", 100) + "[scopes.\"a\x00\"]" + strings.Repeat("\n# more", 100)
	_, err := llmgov.FromTOML(config)
	wantArgError(t, "FromTOML", err, llmgov.ErrInvalidArg, "toml", `[scopes."a\x00"]`)
	var e *llmgov.Error
	if errors.As(err, &e) && (len(e.Value) > 250 || !strings.HasPrefix(e.Value, "…") || !strings.HasSuffix(e.Value, "…")) {
		t.Errorf("want about 200 bytes around the NUL, got %d: %q", len(e.Value), e.Value)
	}
}

func TestARouteOfAnotherGovernorIsRefused(t *testing.T) {
	gov, _ := newGovernor(t)
	other, _ := newGovernor(t)
	mine := must[llmgov.Route](t)(gov.Route("tenants/acme"))
	theirs := must[llmgov.Route](t)(other.Route("tenants/acme"))
	if mine == theirs {
		t.Fatalf("two governors handed out the same route number %d", mine)
	}
	_, err := gov.TryAcquire(llmgov.Request{Route: theirs, InputTokens: 100})
	wantArgError(t, "TryAcquire", err, llmgov.ErrInvalidRequest, "route", fmt.Sprint(uint64(theirs)))
	if err == nil || !strings.Contains(err.Error(), "belongs to another governor") {
		t.Errorf("want the message to say whose route it is: %v", err)
	}
	_, err = gov.Acquire(context.Background(), llmgov.Request{Route: theirs, InputTokens: 100})
	wantArgError(t, "Acquire", err, llmgov.ErrInvalidRequest, "route", fmt.Sprint(uint64(theirs)))
	for _, g := range []*llmgov.Governor{gov, other} {
		for _, s := range must[*llmgov.Snapshot](t)(g.Snapshot()).Scopes {
			for _, l := range s.Limits {
				if l.Reserved != 0 {
					t.Errorf("%s %s holds %d after refusals", s.Path, l.Dimension, l.Reserved)
				}
			}
		}
	}
	must[*llmgov.Permit](t)(other.TryAcquire(llmgov.Request{Route: theirs, InputTokens: 100})).Cancel()

	// Classes likewise; the default class, 0, is every governor's.
	myBatch := must[llmgov.Class](t)(gov.Class("batch"))
	theirBatch := must[llmgov.Class](t)(other.Class("batch"))
	if myBatch == theirBatch {
		t.Fatalf("two governors handed out the same class number %d", myBatch)
	}
	_, err = gov.TryAcquire(llmgov.Request{Route: mine, Class: theirBatch})
	wantArgError(t, "TryAcquire", err, llmgov.ErrInvalidRequest, "class_id", fmt.Sprint(uint64(theirBatch)))
	if err == nil || !strings.Contains(err.Error(), "this class belongs to another governor") {
		t.Errorf("want the message to say whose class it is: %v", err)
	}
	must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: mine, Class: myBatch})).Cancel()
	must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: mine, Class: 0})).Cancel()

	// Scopes likewise: each governor interns its first scope at index 0.
	theirScope := must[llmgov.Scope](t)(other.Scope("tenants/acme"))
	if theirScope == must[llmgov.Scope](t)(gov.Scope("tenants/acme")) {
		t.Fatalf("two governors handed out the same scope number %d", theirScope)
	}
	_, err = gov.ScopeSnapshot(theirScope)
	wantArgError(t, "ScopeSnapshot", err, llmgov.ErrInvalidRequest, "scope", fmt.Sprint(uint64(theirScope)))
	if err == nil || !strings.Contains(err.Error(), "this scope belongs to another governor") {
		t.Errorf("want the message to say whose scope it is: %v", err)
	}
}

func TestStatusesOutside100To999AreRefused(t *testing.T) {
	gov, _ := newGovernor(t)
	route := must[llmgov.Route](t)(gov.Route("tenants/a", "openai/org/gpt-4o"))
	permit := must[*llmgov.Permit](t)(gov.TryAcquire(llmgov.Request{Route: route, InputTokens: 10}))
	defer permit.Cancel()
	now := time.Now()
	retry := http.Header{"Retry-After": {"30"}}
	for _, status := range []int{-1, 0, 99, 1000, 65535, 70000} {
		value := strconv.Itoa(status)
		_, err := llmgov.ClassifyResponse(status, retry, nil, llmgov.ProviderAuto, now)
		wantArgError(t, "ClassifyResponse", err, llmgov.ErrInvalidRequest, "status", value)
		_, err = llmgov.ClassifyResponseJSON(status, retry, nil, llmgov.ProviderAuto, now)
		wantArgError(t, "ClassifyResponseJSON", err, llmgov.ErrInvalidRequest, "status", value)
		_, err = permit.Report(status, retry, nil)
		wantArgError(t, "Report", err, llmgov.ErrInvalidRequest, "status", value)
	}
	if s := must[*llmgov.Snapshot](t)(gov.Snapshot()); s.AdmittedThenProviderRejected != 0 {
		t.Errorf("a refused status was fed back: %+v", s)
	}
	for _, status := range []int{100, 429, 999} {
		must[llmgov.Classification](t)(llmgov.ClassifyResponse(status, nil, nil, llmgov.ProviderAuto, now))
	}
	must[llmgov.Classification](t)(permit.Report(999, nil, nil))
}
