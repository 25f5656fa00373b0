package check

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// ErrUnsafe is what [Report.Err] wraps when some finding is a [Problem].
var ErrUnsafe = errors.New("redlock: unsafe configuration")

// Status is the verdict on one setting, from best to worst except for
// Unknown, which sits between OK and Warning: not seen is not safe.
type Status int

// The verdicts of a [Finding].
const (
	OK      Status = iota // safe for the lock
	Unknown               // could not be read (CONFIG is often disabled on managed Redis)
	Warning               // safe only with care, e.g. delayed restarts
	Problem               // the lock can be granted twice, or a fence repeated
)

var statusNames = [...]string{"ok", "unknown", "warning", "problem"}

func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return "status(" + strconv.Itoa(int(s)) + ")"
	}
	return statusNames[s]
}

// MarshalText writes the status as its name, for JSON.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Finding is what [Nodes] found about one setting of one node.
type Finding struct {
	Setting string `json:"setting"` // a server setting (maxmemory-policy) or a client setting (PoolSize)
	Source  string `json:"source"`  // "server", or "client": what the node's driver reports of its client
	Value   string `json:"value"`   // as read; "" when Unknown
	Status  Status `json:"status"`
	Why     string `json:"why"` // what the value means for the lock
}

// NodeReport is what [Nodes] found about one node.
type NodeReport struct {
	Node     string    `json:"node"` // "master 0", "fence counter"
	Addr     string    `json:"addr"` // host:port, or "" when the driver does not name one
	Findings []Finding `json:"findings"`
}

// Reachable reports whether n's node answered INFO.
func (n NodeReport) Reachable() bool {
	for _, f := range n.Findings {
		if f.Setting == "reachable" {
			return false
		}
	}
	return true
}

func (n NodeReport) label() string {
	if n.Addr == "" {
		return n.Node
	}
	return n.Node + " (" + n.Addr + ")"
}

// Report is the outcome of [Nodes] (and of redlock's Client.Check): one
// NodeReport per master, in the order given, and one for the fence
// counter's node when there is one.
type Report struct {
	Masters []NodeReport `json:"masters"`
	Fence   *NodeReport  `json:"fence,omitempty"`
}

// Worst is the worst status in the report ([Unknown] counts below
// [Warning]).
func (r Report) Worst() Status {
	worst := OK
	for _, n := range r.nodes() {
		for _, f := range n.Findings {
			worst = max(worst, f.Status)
		}
	}
	return worst
}

// Err is nil unless some finding is a [Problem]; then it wraps
// [ErrUnsafe] and names each problem.
func (r Report) Err() error {
	var bad []string
	for _, n := range r.nodes() {
		for _, f := range n.Findings {
			if f.Status == Problem {
				bad = append(bad, fmt.Sprintf("%s %s is %q: %s", n.label(), f.Setting, f.Value, f.Why))
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnsafe, strings.Join(bad, "; "))
}

func (r Report) nodes() []NodeReport {
	if r.Fence == nil {
		return r.Masters
	}
	return append(r.Masters[:len(r.Masters):len(r.Masters)], *r.Fence)
}

// String is r as `redlock-bench check` prints it: a table with one line per
// finding (node, address, setting, value, status, why), then the worst
// status.
func (r Report) String() string {
	var b strings.Builder
	_, _ = r.WriteTo(&b)
	return b.String()
}

// WriteTo writes r to w as [Report.String] reads.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	tw := tabwriter.NewWriter(cw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDR\tSETTING\tVALUE\tSTATUS\tWHY")
	for _, n := range r.nodes() {
		for _, f := range n.Findings {
			v := f.Value
			if v == "" {
				v = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Addr, f.Setting, v, f.Status, f.Why)
		}
	}
	if err := tw.Flush(); err != nil {
		return cw.n, err
	}
	_, err := fmt.Fprintf(cw, "worst: %s\n", r.Worst())
	return cw.n, err
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}
