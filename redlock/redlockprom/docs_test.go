package redlockprom

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// registered returns the names of the metric families cs describe.
func registered(t *testing.T, cs ...prometheus.Collector) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		match := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, match, d.String())
		names[match[1]] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\bquorumlock_[a-z0-9_]+`)

// checkNames asserts that every quorumlock_ metric named in expr is one
// that New("quorumlock") registers (a histogram by its _bucket, _count or
// _sum series), and returns how many it named.
func checkNames(t *testing.T, names map[string]bool, where, expr string) int {
	t.Helper()
	found := metricName.FindAllString(expr, -1)
	for _, name := range found {
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && names[b] {
				base = b
			}
		}
		assert.True(t, names[base], "%s names %s, which redlockprom does not register", where, name)
	}
	return len(found)
}

func TestDashboardNamesRegisteredMetrics(t *testing.T) {
	m, err := New("quorumlock")
	require.NoError(t, err)
	leaders, err := NewLeaders("quorumlock", "relay")
	require.NoError(t, err)
	names := registered(t, m, leaders)
	raw, err := os.ReadFile("../../docs/grafana/quorumlock-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.Positive(t, checkNames(t, names, "panel "+p.Title, tg.Expr), "panel %q queries no quorumlock metric", p.Title)
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				used[strings.TrimSuffix(n, "_bucket")] = true
			}
		}
	}
	for name := range names {
		assert.True(t, used[name], "the dashboard shows nothing of %s", name)
	}
}

func TestAlertRules(t *testing.T) {
	m, err := New("quorumlock")
	require.NoError(t, err)
	leaders, err := NewLeaders("quorumlock", "relay")
	require.NoError(t, err)
	names := registered(t, m, leaders)
	raw, err := os.ReadFile("../../docs/grafana/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true) // a misspelt key is an error, not a rule without it
	require.NoError(t, dec.Decode(&rules))
	require.Len(t, rules.Groups, 1)
	alerts := map[string]bool{}
	for _, r := range rules.Groups[0].Rules {
		require.NotEmpty(t, r.Alert)
		assert.False(t, alerts[r.Alert], "alert %s twice", r.Alert)
		alerts[r.Alert] = true
		assert.Positive(t, checkNames(t, names, "alert "+r.Alert, r.Expr), "alert %s queries no quorumlock metric", r.Alert)
		assert.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
		assert.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), "alert %s: unbalanced parentheses", r.Alert)
	}
	// The alerts docs/operations.md tells an operator to set.
	for _, want := range []string{"QuorumlockFenceRejectionsAboveBaseline", "QuorumlockRenewalFailures", "QuorumlockMasterQuarantined", "QuorumlockCheckProblem",
		"QuorumlockNoLeader", "QuorumlockTwoLeaders"} {
		assert.True(t, alerts[want], "no alert %s", want)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	for a := range alerts {
		assert.True(t, strings.Contains(string(doc), "`"+a+"`"), "docs/operations.md does not describe alert %s", a)
	}
	for name := range names {
		assert.True(t, strings.Contains(string(doc), "`"+name+"`"), "docs/operations.md does not describe metric %s", name)
	}
}
