package redlockprom

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"quorumlock.dev/redlock"
)

// Leaders is a gauge of leadership per role: 1 while this process leads the
// role, else 0. Its roles are fixed by [NewLeaders], so its series do not
// grow with what the program is told; a role not among them is not counted.
// Register it beside a Metrics; it is safe for concurrent use.
type Leaders struct {
	gauge *prometheus.GaugeVec
	roles map[string]prometheus.Gauge
}

// NewLeaders returns the gauge <namespace>_leader{role}, with a series at 0
// for each of roles. Wire it to the hooks of package leadership:
// leadership.Hooks{TermStarted: l.TermStarted, TermEnded: l.TermEnded}.
// A namespace that is not a Prometheus name, or an empty role, gives an error
// wrapping redlock.ErrInvalidArgument.
func NewLeaders(namespace string, roles ...string) (*Leaders, error) {
	if namespace != "" && !validName.MatchString(namespace) {
		return nil, fmt.Errorf("redlockprom: namespace %q is not a Prometheus metric name: %w", namespace, redlock.ErrInvalidArgument)
	}
	l := &Leaders{
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "leader",
			Help: "1 while this process leads the role (package leadership), else 0."}, []string{"role"}),
		roles: make(map[string]prometheus.Gauge, len(roles)),
	}
	for _, r := range roles {
		if r == "" {
			return nil, fmt.Errorf("redlockprom: an empty role: %w", redlock.ErrInvalidArgument)
		}
		l.roles[r] = l.gauge.WithLabelValues(r)
	}
	return l, nil
}

// TermStarted is the TermStarted hook of leadership.Hooks.
func (l *Leaders) TermStarted(role string, _ uint64) {
	if g, ok := l.roles[role]; ok {
		g.Set(1)
	}
}

// TermEnded is the TermEnded hook of leadership.Hooks.
func (l *Leaders) TermEnded(role string, _ uint64, _ error) {
	if g, ok := l.roles[role]; ok {
		g.Set(0)
	}
}

// Describe implements [prometheus.Collector].
func (l *Leaders) Describe(ch chan<- *prometheus.Desc) { l.gauge.Describe(ch) }

// Collect implements [prometheus.Collector].
func (l *Leaders) Collect(ch chan<- prometheus.Metric) { l.gauge.Collect(ch) }
