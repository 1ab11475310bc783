package llmgov_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"llmgov.dev/llmgov"
)

// llmgovBinary is the CLI that `cargo build -p llmgov-cli` (or `make
// test`'s cargo test) leaves in the cargo target directory.
func llmgovBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CARGO_TARGET_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "target")
	}
	path, err := filepath.Abs(filepath.Join(dir, "debug", "llmgov"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no llmgov CLI at %s (build it with `cargo build -p llmgov-cli`): %v", path, err)
	}
	return path
}

// What MetricsJSON gives, written to a file, is what `llmgov top` draws.
func TestTopDrawsTheMetricsJSON(t *testing.T) {
	gov := aimdGovernor(t)
	path := filepath.Join(t.TempDir(), "metrics.json")
	if err := os.WriteFile(path, must[[]byte](t)(gov.MetricsJSON()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(llmgovBinary(t), "top", path, "--once").CombinedOutput()
	if err != nil {
		t.Fatalf("llmgov top: %v\n%s", err, out)
	}
	text := string(out)
	t.Log(text)
	line := func(prefix, dimension, window string) string {
		t.Helper()
		for _, l := range strings.Split(text, "\n") {
			if fields := strings.Fields(l); len(fields) > 2 && fields[0] == prefix && fields[1] == dimension &&
				fields[2] == window {
				return l
			}
		}
		t.Fatalf("no %s %s %s line in\n%s", prefix, dimension, window, text)
		return ""
	}
	if !strings.Contains(text, "admitted 2  rate limited 1  never fit 0  breaker refusals 0  provider 429s 1  expired 0") {
		t.Errorf("counters:\n%s", text)
	}
	if !strings.Contains(text,
		"refused here: concurrency 1  by the provider: tokens 1  retry amplification 2.00\n") {
		t.Errorf("refusals and retry amplification:\n%s", text)
	}
	// The per-minute tokens at the limit AIMD set, the configured one noted.
	if l := line("openai/org", "tokens", "1m"); !strings.Contains(l, "22500 / 22500") ||
		!strings.HasSuffix(l, "100%  (configured 30000)") {
		t.Errorf("tokens a minute: %q", l)
	}
	if l := line("openai/org", "tokens", "1d"); !strings.Contains(l, "6077 / 1000000") ||
		!strings.Contains(l, "  100  ") {
		t.Errorf("tokens a day: %q", l)
	}
	if l := line("tenants/acme", "concurrency", "-"); !strings.Contains(l, "1 / 2") || !strings.HasSuffix(l, " 50%") {
		t.Errorf("the tenant's slots: %q", l)
	}
	if !strings.Contains(text, "queues: none\n") {
		t.Errorf("queues:\n%s", text)
	}
}

// A snapshot alone (SnapshotJSON) is drawn too, without the lines only
// the metrics carry; a file that is neither is a clear error.
func TestTopReadsASnapshotAndRefusesOtherJSON(t *testing.T) {
	gov := aimdGovernor(t)
	dir := t.TempDir()
	snapshot, other := filepath.Join(dir, "snapshot.json"), filepath.Join(dir, "other.json")
	if err := os.WriteFile(snapshot, must[[]byte](t)(gov.SnapshotJSON()), 0o600); err != nil {
		t.Fatal(err)
	}
	queues := must[*llmgov.QueueMetrics](t)(gov.QueueMetrics())
	if err := os.WriteFile(other, must[[]byte](t)(json.Marshal(queues)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(llmgovBinary(t), "top", snapshot, "--once").CombinedOutput()
	if text := string(out); err != nil || !strings.Contains(text, "22500 / 22500") ||
		strings.Contains(text, "retry amplification") || strings.Contains(text, "queues:") {
		t.Errorf("a snapshot (%v):\n%s", err, text)
	}
	out, err = exec.Command(llmgovBinary(t), "top", other, "--once").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a governor snapshot") {
		t.Errorf("queue metrics are no snapshot (%v):\n%s", err, out)
	}
}
