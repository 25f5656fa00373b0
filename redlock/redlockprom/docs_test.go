package redlockprom

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"quorumlock.dev/redlock"
)

// registered returns the names of the metric families cs describe.
func registered(t *testing.T, cs ...prometheus.Collector) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name := range describe(t, cs...) {
		names[name] = true
	}
	return names
}

// describe returns the label names of each metric family cs describe.
func describe(t *testing.T, cs ...prometheus.Collector) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	variable := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	out := map[string][]string{}
	for d := range ch {
		match := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, match, d.String())
		labels := variable.FindStringSubmatch(d.String())
		require.NotNil(t, labels, d.String())
		out[match[1]] = nil
		for l := range strings.SplitSeq(labels[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out[match[1]] = append(out[match[1]], l)
			}
		}
	}
	return out
}

// family is what a metric family of redlockprom offers a query.
type family struct {
	histogram bool
	// labels maps each label to the values its series take; nil for a
	// label whose values the deployment chooses (master, node, role).
	labels map[string]map[string]bool
}

// openLabels take values from the deployment (addresses, role names), not
// from a word list of the package.
var openLabels = map[string]bool{"master": true, "node": true, "role": true}

// schema is every family that New("quorumlock") and NewLeaders register,
// with its labels and, for the labels of fixed words, every value the
// series can take (each exists at 0 from the start, a vote's from the
// first vote: one of each is cast here).
func schema(t *testing.T) map[string]family {
	t.Helper()
	m, err := New("quorumlock")
	require.NoError(t, err)
	leaders, err := NewLeaders("quorumlock", "relay")
	require.NoError(t, err)
	for _, v := range votes {
		m.Hooks().Vote(t.Context(), redlock.Event{Master: "127.0.0.1:1", Outcome: v})
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	require.NoError(t, reg.Register(leaders))
	out := map[string]family{}
	for name, labels := range describe(t, m, leaders) {
		f := family{labels: map[string]map[string]bool{}}
		for _, l := range labels {
			if !openLabels[l] {
				f.labels[l] = map[string]bool{}
			} else {
				f.labels[l] = nil
			}
		}
		out[name] = f
	}
	gathered, err := reg.Gather()
	require.NoError(t, err)
	for _, g := range gathered {
		f, ok := out[g.GetName()]
		require.True(t, ok, g.GetName())
		f.histogram = g.GetType() == dto.MetricType_HISTOGRAM
		for _, m := range g.GetMetric() {
			for _, lp := range m.GetLabel() {
				if vals := f.labels[lp.GetName()]; vals != nil {
					vals[lp.GetValue()] = true
				}
			}
		}
		out[g.GetName()] = f
	}
	for name, f := range out {
		for l, vals := range f.labels {
			require.True(t, vals == nil || len(vals) > 0, "%s: no value of label %s was gathered", name, l)
		}
	}
	return out
}

var (
	metricName = regexp.MustCompile(`\bquorumlock_[a-z0-9_]+`)
	selector   = regexp.MustCompile(`\b(quorumlock_[a-z0-9_]+)\b(\s*\{([^}]*)\})?`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	grouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	wordList   = regexp.MustCompile(`^[a-z_]+(\|[a-z_]+)*$`)
	// Labels Prometheus puts on every series of a scrape target.
	targetLabels = map[string]bool{"job": true, "instance": true}
)

// exprProblems checks a PromQL expression against the families of s:
// every quorumlock_ metric it names is registered (a histogram by its
// _bucket, _count or _sum series), every label it matches or groups by is
// one of those metrics' labels (le of a _bucket, or a target's job and
// instance), and every value it matches a label of fixed words with is
// one those series take. It returns the labels the expression groups by
// and what is wrong with it.
func exprProblems(s map[string]family, expr string) (groupedBy map[string]bool, problems []string) {
	labels := map[string]bool{}
	bucket := false
	named := 0
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		named++
		name, base, suffix := m[1], m[1], ""
		f, ok := s[name]
		for _, sfx := range []string{"_bucket", "_count", "_sum"} {
			if b, cut := strings.CutSuffix(name, sfx); cut && s[b].histogram {
				base, suffix, f, ok = b, sfx, s[b], true
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is no metric redlockprom registers", name))
			continue
		}
		if _, plain := s[name]; !plain && suffix == "" {
			problems = append(problems, fmt.Sprintf("%s is no metric redlockprom registers", name))
		}
		if s[base].histogram && suffix == "" {
			problems = append(problems, fmt.Sprintf("%s is a histogram: query its _bucket, _count or _sum", name))
		}
		bucket = bucket || suffix == "_bucket"
		for l := range f.labels {
			labels[l] = true
		}
		for _, mm := range matcher.FindAllStringSubmatch(m[3], -1) {
			label, op, value := mm[1], mm[2], mm[3]
			vals, known := f.labels[label]
			switch {
			case targetLabels[label], label == "le" && suffix == "_bucket":
				continue
			case !known:
				problems = append(problems, fmt.Sprintf("%s has no label %s", name, label))
				continue
			case vals == nil:
				continue
			}
			var words []string
			if op == "=" || op == "!=" || wordList.MatchString(value) {
				words = strings.Split(value, "|")
			}
			if op == "=" || op == "!=" {
				words = []string{value}
			}
			for _, w := range words {
				if !vals[w] {
					problems = append(problems, fmt.Sprintf("%s{%s}: %q is no value of %s", name, label, w, label))
				}
			}
			if words == nil {
				re, err := regexp.Compile("^(?:" + value + ")$")
				matched := false
				for v := range vals {
					matched = matched || (err == nil && re.MatchString(v))
				}
				if !matched {
					problems = append(problems, fmt.Sprintf("%s{%s%s%q} matches no value of %s", name, label, op, value, label))
				}
			}
		}
	}
	if named == 0 {
		problems = append(problems, "it queries no quorumlock metric")
	}
	groupedBy = map[string]bool{}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(g[2], ",") {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			if g[1] == "by" {
				groupedBy[l] = true
			}
			if !labels[l] && !targetLabels[l] && (l != "le" || !bucket) {
				problems = append(problems, fmt.Sprintf("%s (%s): no metric it queries has label %s", g[1], g[2], l))
			}
		}
	}
	return groupedBy, problems
}

// TestExprProblems: the check of the dashboard and the rules finds a
// wrong metric, label or value, and passes the right ones.
func TestExprProblems(t *testing.T) {
	s := schema(t)
	for _, tc := range []struct {
		expr string
		want string // in a problem; "" for none
	}{
		{`sum by (job, outcome) (increase(quorumlock_lock_hold_duration_seconds_count{outcome=~"lease_ran_out|no_progress"}[10m])) > 0`, ""},
		{`histogram_quantile(0.99, sum by (job, le) (rate(quorumlock_lock_acquire_wait_seconds_bucket{outcome="acquired", job=~"$job"}[5m])))`, ""},
		{`max by (job, master) (quorumlock_lock_master_quarantined) == 1`, ""},
		{`sum by (master, vote) (rate(quorumlock_lock_master_votes_total{vote=~"failed|timeout"}[5m]))`, ""},
		{`sum(quorumlock_leader{role="anything"})`, ""},
		{`rate(quorumlock_lock_hold_seconds_count[5m])`, "quorumlock_lock_hold_seconds_count is no metric"},
		{`rate(quorumlock_lock_renewal_failures[5m])`, "quorumlock_lock_renewal_failures is no metric"},
		{`rate(quorumlock_lock_waiters_count[5m])`, "quorumlock_lock_waiters_count is no metric"},
		{`quorumlock_lock_hold_duration_seconds{outcome="unlocked"}`, "is a histogram"},
		{`increase(quorumlock_lock_hold_duration_seconds_count{result="unlocked"}[5m])`, "has no label result"},
		{`increase(quorumlock_lock_hold_duration_seconds_count{outcome="lease_expired"}[5m])`, `"lease_expired" is no value`},
		{`increase(quorumlock_lock_hold_duration_seconds_count{outcome=~"lease_ran_out|paused"}[5m])`, `"paused" is no value`},
		{`increase(quorumlock_lock_hold_duration_seconds_count{outcome=~"pause.*"}[5m])`, "matches no value"},
		{`increase(quorumlock_lock_renewal_failures_total{outcome="no_progress"}[5m])`, "has no label outcome"},
		{`sum by (resource) (rate(quorumlock_lock_acquire_attempts_total[5m]))`, "no metric it queries has label resource"},
		{`histogram_quantile(0.99, sum by (le) (rate(quorumlock_lock_acquire_wait_seconds_count[5m])))`, "no metric it queries has label le"},
		{`up == 0`, "no quorumlock metric"},
	} {
		_, problems := exprProblems(s, tc.expr)
		if tc.want == "" {
			assert.Empty(t, problems, tc.expr)
			continue
		}
		found := false
		for _, p := range problems {
			found = found || strings.Contains(p, tc.want)
		}
		assert.True(t, found, "%s: want a problem with %q, got %q", tc.expr, tc.want, problems)
	}
}

var templateLabel = regexp.MustCompile(`\{\{\s*\$?(?:labels\.)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}|\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// templateLabels are the labels a legend or annotation template names.
func templateLabels(tmpl string) []string {
	var out []string
	for _, m := range templateLabel.FindAllStringSubmatch(tmpl, -1) {
		l := m[1] + m[2]
		if l != "value" {
			out = append(out, l)
		}
	}
	return out
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
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	used := map[string]bool{}
	s := schema(t)
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			by, problems := exprProblems(s, tg.Expr)
			assert.Empty(t, problems, "panel %q: %s", p.Title, tg.Expr)
			for _, l := range templateLabels(tg.LegendFormat) {
				assert.True(t, by[l], "panel %q: the legend names %s, which the query does not keep", p.Title, l)
			}
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(n, suffix); ok && s[b].histogram {
						n = b
					}
				}
				used[n] = true
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
	s := schema(t)
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
		by, problems := exprProblems(s, r.Expr)
		assert.Empty(t, problems, "alert %s: %s", r.Alert, r.Expr)
		for _, a := range []string{r.Annotations["summary"], r.Annotations["description"]} {
			for _, l := range templateLabels(a) {
				assert.True(t, by[l], "alert %s: its annotation names %s, which the query does not keep", r.Alert, l)
			}
		}
		assert.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
		assert.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), "alert %s: unbalanced parentheses", r.Alert)
	}
	// The alerts docs/operations.md tells an operator to set.
	for _, want := range []string{"QuorumlockFenceRejectionsAboveBaseline", "QuorumlockRenewalFailures", "QuorumlockMasterQuarantined", "QuorumlockCheckProblem",
		"QuorumlockNoLeader", "QuorumlockTwoLeaders", "QuorumlockLocksLost", "QuorumlockAcquireSlow", "QuorumlockLockWaitLong"} {
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
