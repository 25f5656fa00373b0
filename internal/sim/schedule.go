package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Config is the shape of a schedule; the seed draws the rest.
type Config struct {
	Masters   int           // 5
	Clients   int           // separate processes, one redlock.Client each
	Cycles    int           // lock cycles per client
	Resources int           // how many resources they share (few: contention)
	Faults    int           // at least this many per schedule
	TTL       time.Duration // of every lock; the pauses and windows scale with it
}

// DefaultConfig is the schedule the issue asks for: 3 clients × 30 cycles
// over 5 masters and a counter, at least 3 faults, TTLs of seconds (drawn
// per schedule when TTL is 0).
var DefaultConfig = Config{Masters: 5, Clients: 3, Cycles: 30, Resources: 2, Faults: 3}

// kind is a fault's kind.
type kind int

const (
	delayed     kind = iota // a client's calls to a master are slow
	lostAsk                 // a client's requests to a master are lost
	lostReply               // a master applies a client's calls, the replies are lost
	paused                  // a master stops; its queue is applied when it resumes
	down                    // a master refuses connections
	restarted               // a master restarts empty (no persistence): documented failure mode
	clockStep               // a master's clock jumps forward: documented failure mode
	counterLost             // the fence counter's node loses its data
	counterDown             // the fence counter's node refuses connections
	clientPause             // a client process stops past its lease: documented failure mode
	kinds
)

var kindNames = [...]string{"delayed", "lost-ask", "lost-reply", "paused", "down", "restarted", "clock-step", "counter-lost", "counter-down", "client-pause"}

func (k kind) String() string { return kindNames[k] }

// unsafe reports a fault under which the lock alone may be held twice
// (redlock's doc names them): only the fence protects then.
func (k kind) unsafe() bool { return k == restarted || k == clockStep || k == clientPause }

// allMasters is a network fault's master when it hits all of them.
const allMasters = -1

// fault is one fault of a schedule, at a time from the schedule's start.
type fault struct {
	kind   kind
	at     time.Duration
	lasts  time.Duration
	client int
	master int
	delay  time.Duration // delayed; clock-step's jump
}

func (f fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v at %v", f.kind, f.at)
	if f.lasts > 0 {
		fmt.Fprintf(&b, " for %v", f.lasts)
	}
	switch f.kind {
	case delayed, lostAsk, lostReply:
		if f.master == allMasters {
			fmt.Fprintf(&b, ", client %d to every master", f.client)
		} else {
			fmt.Fprintf(&b, ", client %d to master %d", f.client, f.master)
		}
	case paused, down, restarted:
		fmt.Fprintf(&b, ", master %d", f.master)
	case clockStep:
		fmt.Fprintf(&b, ", master %d by %v", f.master, f.delay)
	case clientPause:
		fmt.Fprintf(&b, ", client %d", f.client)
	}
	if f.kind == delayed {
		fmt.Fprintf(&b, ", +%v", f.delay)
	}
	return b.String()
}

// Schedule is what one seed draws: the faults and the clients' settings.
type Schedule struct {
	Seed   uint64
	Config Config
	Faults []fault
	Fair   []bool // by client: WithFairness
}

// Unsafe reports whether a fault of the schedule is a documented failure
// mode of the lock alone.
func (s Schedule) Unsafe() bool {
	for _, f := range s.Faults {
		if f.kind.unsafe() {
			return true
		}
	}
	return false
}

// Draw makes the schedule of seed.
func Draw(seed uint64, cfg Config) Schedule {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	if cfg.TTL == 0 {
		// Half a second to two: the drift allowance (1% + 2 ms) is then
		// smaller than a slow round trip, as a lease bug needs to show.
		cfg.TTL = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}[r.IntN(3)]
	}
	s := Schedule{Seed: seed, Config: cfg, Fair: make([]bool, cfg.Clients)}
	for i := range s.Fair {
		s.Fair[i] = r.IntN(2) == 0
	}
	// The clients run for about Cycles sections of a few hundred ms each;
	// faults fall in the first part of that span, so they meet traffic.
	span := time.Duration(cfg.Cycles) * 200 * time.Millisecond
	n := cfg.Faults + r.IntN(cfg.Faults+1)
	for range n {
		f := fault{
			kind:   kind(r.IntN(int(kinds))),
			at:     time.Duration(r.Int64N(int64(span))),
			client: r.IntN(cfg.Clients),
			master: r.IntN(cfg.Masters),
		}
		switch f.kind {
		case delayed:
			// Up to and beyond the node timeout (50 ms).
			f.delay = []time.Duration{1, 10, 20, 30, 40, 48, 80}[r.IntN(7)] * time.Millisecond
			f.lasts = time.Duration(r.Int64N(int64(cfg.TTL)))
			if r.IntN(2) == 0 {
				f.master = allMasters // the client's own network is slow
			}
		case lostAsk, lostReply, down, counterDown:
			f.lasts = time.Duration(r.Int64N(int64(cfg.TTL)))
		case paused:
			f.lasts = time.Duration(r.Int64N(int64(2 * cfg.TTL)))
		case clockStep:
			f.delay = time.Duration(r.Int64N(int64(cfg.TTL)))
		case clientPause:
			f.lasts = cfg.TTL + time.Duration(r.Int64N(int64(cfg.TTL)))
		}
		s.Faults = append(s.Faults, f)
	}
	return s
}

func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d masters, %d clients × %d cycles on %d resources, TTL %v, fair %v\n",
		s.Seed, s.Config.Masters, s.Config.Clients, s.Config.Cycles, s.Config.Resources, s.Config.TTL, s.Fair)
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  %v\n", f)
	}
	return b.String()
}
