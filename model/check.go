package model

import (
	"errors"
	"fmt"
	"time"
)

// Kind is what one step of a run does, in the terms of redlock.pml and
// fence.pml. Each is printed by the models as an "EV" line of its name.
type Kind int

const (
	Round       Kind = iota + 1 // a client starts a round of SET NX for Token (Client.lockRound)
	Set                         // Master applied SET NX PX with Token; Ok: it set the key
	SetReply                    // the client heard Set's reply in time; Ok: the key was set
	Release                     // Master applied release.lua with Token; Ok: it deleted the key
	ExtendRound                 // the holder of Token starts an Extend (Lock.Extend)
	Extend                      // Master applied extend.lua with Token; Ok: it extended the key
	ExtendReply                 // the holder heard Extend's reply in time; Ok: extended
	Extended                    // Extend returned nil; Until: the new lease's end
	Restart                     // Master restarted empty (no persistence)
	Mint                        // the counter's node applied mint.lua: Fence, at its Clock
	CounterLost                 // the counter's node lost fence:<resource>
	MintReply                   // RedisCounter.Mint of Client heard Fence
	Won                         // the lock call of Client returned Token, with Until and Fence (0: a client without a counter, as in fair.pml)
	Enter                       // the holder of Token looked at its lock and starts its work
	Write                       // guardset.lua judged Client's write with Fence; Ok: admitted
	Released                    // the releases of Token are done on every master (Unlock, an undo)

	// The fair policy's steps (fair.pml; fair.go has their rules).
	Hand   // Master's key, which held From (a token, or "q"), went to Waiter with Token (queue.lua's hand_to_head; Ok: handoff.lua's direct handoff)
	Leave  // Waiter's entry left Master's queue (fair_leave.lua, handoff.lua's list)
	Queue  // Waiter's entry went back into Master's queue at Stamp (fair_undo.lua)
	Pass   // Client's lock Token was passed in-process to its waiter Waiter (fair.Policy.passOn)
	Unlock // the holder of Token ends its work and calls Unlock
	Ended  // the lock Token ended before its Unlock: a failed Extend (Lock.lose)
)

var kindNames = [...]string{"", "round", "set", "setreply", "release", "extround", "extend", "extreply", "extended",
	"restart", "mint", "lost", "mintreply", "won", "enter", "write", "released",
	"hand", "leave", "queue", "pass", "unlock", "ended"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Event is one step of a run. At is the world's time (the clock that counts
// a suspend); Mono the client's monotonic clock at a client's step; Until a
// lease's end on that monotonic clock (Lock.Until). A Set with a Waiter is
// fair_lock.lua's: a fair waiter's attempt, which takes the key (Ok) or
// queues the waiter's entry at Stamp, with a claim on Token when Claim.
type Event struct {
	Kind   Kind
	At     time.Duration
	Mono   time.Duration
	Client int
	Master int
	Token  string
	Ok     bool
	Fence  uint64
	Until  time.Duration
	Clock  uint64 // Mint: the node's clock, in fence units (µs)
	Waiter string // a fair waiter's entry on the masters (its id)
	From   string // Hand: what the key held before (the releaser's token, or "q")
	Stamp  uint64 // a fair waiter's arrival stamp: the queue's order
	Claim  bool   // a fair Set that queues: its entry claims the key for Token
}

func (e Event) String() string {
	s := fmt.Sprintf("%v at=%v", e.Kind, e.At)
	switch e.Kind {
	case Restart:
		return s + fmt.Sprintf(" m=%d", e.Master)
	case Hand:
		return s + fmt.Sprintf(" c=%d m=%d from=%s w=%s tok=%s ok=%v", e.Client, e.Master, e.From, e.Waiter, e.Token, e.Ok)
	case Leave:
		return s + fmt.Sprintf(" m=%d w=%s", e.Master, e.Waiter)
	case Queue:
		return s + fmt.Sprintf(" c=%d m=%d w=%s stamp=%d", e.Client, e.Master, e.Waiter, e.Stamp)
	case CounterLost:
		return s
	case Mint:
		return s + fmt.Sprintf(" c=%d fence=%d clock=%d", e.Client, e.Fence, e.Clock)
	case MintReply:
		return s + fmt.Sprintf(" c=%d fence=%d", e.Client, e.Fence)
	}
	s += fmt.Sprintf(" c=%d tok=%s", e.Client, e.Token)
	switch e.Kind {
	case Set, SetReply, Release, Extend, ExtendReply:
		s += fmt.Sprintf(" m=%d ok=%v", e.Master, e.Ok)
		if e.Waiter != "" {
			s += fmt.Sprintf(" w=%s stamp=%d claim=%v", e.Waiter, e.Stamp, e.Claim)
		}
	case Round, ExtendRound, Enter, Unlock:
		s += fmt.Sprintf(" mono=%v", e.Mono)
	case Pass:
		s += fmt.Sprintf(" mono=%v w=%s", e.Mono, e.Waiter)
	case Extended:
		s += fmt.Sprintf(" mono=%v until=%v", e.Mono, e.Until)
	case Won:
		s += fmt.Sprintf(" mono=%v until=%v fence=%d", e.Mono, e.Until, e.Fence)
	case Write:
		s += fmt.Sprintf(" fence=%d ok=%v", e.Fence, e.Ok)
	}
	return s
}

// Config is what the rules depend on.
type Config struct {
	Masters int
	TTL     time.Duration // of every key and lease
	Drift   time.Duration // clockdrift.Allowance(TTL): a master's clock may run fast by this much
	// Pauses: a holder may pause for any time between its look at the lock
	// and its write (redlock.pml's PAUSE); otherwise its write lands before
	// its lease ends, but for Wire.
	Pauses bool
	Wire   time.Duration // the most a write takes on the wire after its look
	// GuardLag is how long after a restart the restart guard may still
	// count the master's vote (the code samples INFO; the model learns at
	// once: 0).
	GuardLag time.Duration
	// EntryTTL is how long a fair waiter's entry stays queued after its
	// latest attempt (WithFairness); 0: entries never expire (fair.pml).
	// EntryDrift widens its end both ways (the master's clock, ms).
	EntryTTL, EntryDrift time.Duration
}

// ErrRejected is wrapped by every Rejection.
var ErrRejected = errors.New("model: the model cannot produce this step")

// Rejection names the first step of a trace that the model cannot produce,
// and the rule it breaks.
type Rejection struct {
	Step  int // 1-based
	Event Event
	Rule  string
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("model: step %d (%v) rejected: %s", r.Step, r.Event, r.Rule)
}

func (r *Rejection) Unwrap() error { return ErrRejected }

// key is a master's lock key: gone for sure from hard on, and maybe from
// soft on (the master's clock may run fast by the drift bound).
type key struct {
	token      string
	soft, hard time.Duration
}

type lock struct {
	client                int
	startAt, startMono    time.Duration // the round's, then the Extend's
	got                   map[int]bool  // masters whose reply counts
	set                   map[int]bool  // masters that set or extended the key in this round
	won                   bool
	dl, until             time.Duration // the lease's end, on the world's clock and the client's
	fence                 uint64
	extAt, extMono        time.Duration
	extGot                map[int]bool
	extending, inCS, done bool
	ended                 bool // a failed Extend ended it (Lock.lose)
	passing               bool // passed in-process; its recipient's Won comes next
	passAt                time.Duration
}

// Checker steps through a trace with the rules of redlock.pml and
// fence.pml, generalised to any number of masters, clients and acquisitions
// and to continuous time. Make one with NewChecker (the zero value checks a
// run with no masters).
type Checker struct {
	cfg     Config
	step    int
	now     time.Duration
	keys    []key
	quar    []time.Duration // a restarted master's votes count again from then
	rst     []time.Duration // ... and were held out from then (its restart, and GuardLag)
	locks   map[string]*lock
	cnt     uint64 // the counter's key; 0: missing
	last    map[int]uint64
	lastAt  map[int]time.Duration
	issued  map[uint64]bool // fences RedisCounter.Mint returned
	used    map[uint64]bool // fences handed out with a lock
	stored  uint64          // the guarded value's fence
	written bool
	fair    fairState
}

// NewChecker returns a checker at the start of a run: no keys, no counter.
func NewChecker(cfg Config) *Checker {
	return &Checker{cfg: cfg, keys: make([]key, cfg.Masters), quar: make([]time.Duration, cfg.Masters), rst: make([]time.Duration, cfg.Masters),
		locks: make(map[string]*lock), last: make(map[int]uint64), lastAt: make(map[int]time.Duration),
		issued: make(map[uint64]bool), used: make(map[uint64]bool), fair: newFairState(cfg.Masters)}
}

// Check runs events through a new checker: nil, or the *Rejection of the
// first step the model cannot produce.
func Check(cfg Config, events []Event) error {
	c := NewChecker(cfg)
	for _, e := range events {
		if err := c.Step(e); err != nil {
			return err
		}
	}
	return nil
}

func (c *Checker) lease() time.Duration { return c.cfg.TTL - c.cfg.Drift }

// counts is redlock.pml's counts(m): the restart guard keeps a restarted
// master's vote out for a TTL (from GuardLag after the restart on).
func (c *Checker) counts(m int) bool { return c.now < c.rst[m] || c.now >= c.quar[m] }

// holds reports whether master m's key holds token for sure (yes), may
// (maybe: its TTL may have run out on a fast clock), or not.
func (c *Checker) holds(m int, token string) (yes, maybe bool) {
	k := c.keys[m]
	if k.token == "" || c.now >= k.hard {
		return false, false
	}
	if k.token != token {
		return false, false
	}
	return c.now < k.soft, true
}

// Step applies e: nil when the model can take it from the state reached.
func (c *Checker) Step(e Event) error {
	if c.locks == nil {
		*c = *NewChecker(c.cfg)
	}
	c.step++
	reject := func(format string, args ...any) error {
		return &Rejection{Step: c.step, Event: e, Rule: fmt.Sprintf(format, args...)}
	}
	if e.At < c.now {
		return reject("time runs backwards: %v after %v", e.At, c.now)
	}
	c.now = e.At
	switch e.Kind {
	case Set, Release, Extend, SetReply, ExtendReply, Restart, Hand, Leave, Queue:
		if e.Master < 0 || e.Master >= c.cfg.Masters {
			return reject("no master %d", e.Master)
		}
	}
	q := c.cfg.Masters/2 + 1
	l := c.locks[e.Token]
	switch e.Kind {
	case Round:
		c.locks[e.Token] = &lock{client: e.Client, startAt: e.At, startMono: e.Mono, got: make(map[int]bool), set: make(map[int]bool)}
	case Set:
		if e.Waiter != "" {
			if rule := c.fairSet(e, l); rule != "" {
				return reject("%s", rule)
			}
			break
		}
		k := &c.keys[e.Master]
		free := k.token == "" || c.now >= k.hard
		held := !free && c.now < k.soft
		switch {
		case e.Ok && held:
			return reject("setKey: SET NX set the key on master %d, which holds %s's key until %v at least", e.Master, k.token, k.soft)
		case !e.Ok && free:
			return reject("setKey: SET NX refused on master %d, which holds no key", e.Master)
		case e.Ok:
			*k = key{e.Token, e.At + c.cfg.TTL - c.cfg.Drift, e.At + c.cfg.TTL}
			if l != nil {
				l.set[e.Master] = true
			}
		}
	case SetReply:
		if l == nil || l.client != e.Client {
			return reject("a reply to a round that is not under way")
		}
		if l.won {
			break // late: the round was decided without it (quorum.Group)
		}
		if e.Ok {
			if !l.set[e.Master] {
				return reject("a SET NX reply says set, and master %d did not set the key", e.Master)
			}
			l.got[e.Master] = c.counts(e.Master)
		}
	case Release, Extend:
		yes, maybe := c.holds(e.Master, e.Token)
		name := map[Kind]string{Release: "release.lua", Extend: "extend.lua"}[e.Kind]
		switch {
		case e.Ok && !maybe:
			return reject("%s succeeded on master %d, which does not hold %s's key", name, e.Master, e.Token)
		case !e.Ok && yes:
			return reject("%s failed on master %d, which holds %s's key", name, e.Master, e.Token)
		case e.Ok && e.Kind == Release:
			c.keys[e.Master] = key{}
		case e.Ok:
			c.keys[e.Master] = key{e.Token, e.At + c.cfg.TTL - c.cfg.Drift, e.At + c.cfg.TTL}
			if l != nil && l.extending {
				l.set[e.Master] = true
			}
		}
	case Restart:
		c.keys[e.Master] = key{}
		clear(c.fair.entries[e.Master])
		c.rst[e.Master], c.quar[e.Master] = e.At+c.cfg.GuardLag, e.At+c.cfg.TTL
	case ExtendRound:
		if l == nil || !l.won || l.client != e.Client {
			return reject("Extend of a lock its client does not hold")
		}
		l.extending, l.extAt, l.extMono, l.extGot, l.set = true, e.At, e.Mono, make(map[int]bool), make(map[int]bool)
	case ExtendReply:
		if l == nil || !l.won {
			return reject("an Extend reply with no Extend under way")
		}
		if !l.extending {
			break // late: the Extend was decided without it (quorum.Group)
		}
		if e.Ok {
			if !l.set[e.Master] {
				return reject("an Extend reply says extended, and master %d did not extend the key", e.Master)
			}
			l.extGot[e.Master] = true // the restart guard holds out no vote of an Extend
		}
	case Extended:
		switch {
		case l == nil || !l.extending:
			return reject("Extend succeeded with no Extend under way")
		case count(l.extGot) < q:
			return reject("Extend succeeded with %d counted replies, fewer than a majority (%d)", count(l.extGot), q)
		case c.now >= l.dl || e.Mono >= l.until:
			return reject("Extend succeeded after the lease it extends ran out at %v (Lock.extended: a lock that ended stays ended)", l.dl)
		case e.Until > l.extMono+c.lease():
			return reject("the new lease ends at %v, past the Extend's start %v plus TTL - drift (%v)", e.Until, l.extMono, c.lease())
		}
		l.extending, l.dl, l.until = false, l.extAt+c.lease(), e.Until
	case Mint:
		if c.cnt != 0 && e.Fence != c.cnt+1 {
			return reject("mint.lua: INCR of %d gave %d", c.cnt, e.Fence)
		}
		if c.cnt == 0 && e.Fence != e.Clock {
			return reject("mint.lua: the missing key set to %d, not to the node's clock %d (the floor)", e.Fence, e.Clock)
		}
		c.cnt = e.Fence
	case CounterLost:
		c.cnt = 0
	case MintReply:
		if e.Fence <= c.last[e.Client] {
			break // ErrCounterRegressed: no fence
		}
		if c.issued[e.Fence] {
			return reject("(c) fence %d returned twice", e.Fence)
		}
		c.issued[e.Fence], c.last[e.Client], c.lastAt[e.Client] = true, e.Fence, e.At
	case Won:
		if l != nil && l.passing {
			if rule := c.passWon(e, l); rule != "" {
				return reject("%s", rule)
			}
			break
		}
		switch {
		case l == nil || l.client != e.Client || l.won:
			return reject("a lock handed out with no round of its own")
		case count(l.got) < q:
			return reject("won with %d counted SET NX replies, fewer than a majority (%d)", count(l.got), q)
		case e.Until > l.startMono+c.lease():
			return reject("Client.lease: the lease ends at %v, past the round's start %v plus TTL - drift (%v)", e.Until, l.startMono, c.lease())
		case c.now >= l.startAt+c.lease() || e.Mono >= e.Until:
			return reject("won after its validity ran out (at %v on the clock that counts suspend)", l.startAt+c.lease())
		case e.Fence != 0 && (e.Fence != c.last[e.Client] || c.lastAt[e.Client] < l.startAt):
			return reject("fence %d is not the one Client.mint got for this round", e.Fence)
		case e.Fence != 0 && c.used[e.Fence]:
			return reject("(c) fence %d handed out with another lock before", e.Fence)
		}
		if e.Fence != 0 {
			c.used[e.Fence] = true
		}
		l.won, l.dl, l.until, l.fence = true, l.startAt+c.lease(), e.Until, e.Fence
	case Enter:
		switch {
		case l == nil || !l.won || l.client != e.Client:
			return reject("work under a lock its client was not given")
		case l.ended:
			return reject("the holder starts its work under a lock that had ended (a failed Extend)")
		case c.now >= l.dl || e.Mono >= l.until:
			return reject("the holder starts its work after its lease ran out at %v (Lock.Context, Lock.Until)", l.dl)
		}
		if !c.cfg.Pauses {
			for t, o := range c.locks {
				if o.inCS && t != e.Token {
					return reject("(a) two holders at work: %s's holder has not finished", t)
				}
			}
		}
		l.inCS = true
	case Write:
		var w *lock
		for _, o := range c.locks {
			if o.won && o.fence == e.Fence && o.client == e.Client {
				w = o
			}
		}
		switch {
		case w == nil || !w.inCS:
			return reject("a write with fence %d that no holder at work of client %d has", e.Fence, e.Client)
		case !c.cfg.Pauses && c.now >= w.dl+c.cfg.Wire:
			return reject("the write lands at %v, after the lease ended at %v (no pause allowed)", c.now, w.dl)
		case e.Ok && c.written && e.Fence <= c.stored:
			return reject("(b) guardset.lua admitted fence %d after %d", e.Fence, c.stored)
		case !e.Ok && (!c.written || e.Fence > c.stored):
			return reject("guardset.lua refused fence %d, above the stored %d", e.Fence, c.stored)
		}
		if e.Ok {
			c.stored, c.written = e.Fence, true
		}
		w.inCS = false
	case Released:
		for m := range c.keys {
			if yes, _ := c.holds(m, e.Token); yes {
				return reject("(e) master %d keeps %s's key after its releases", m, e.Token)
			}
		}
		if l != nil {
			l.inCS, l.done = false, true
		}
	case Hand, Leave, Queue, Pass, Unlock, Ended:
		if rule := c.fairStep(e, l); rule != "" {
			return reject("%s", rule)
		}
	default:
		return reject("unknown step")
	}
	return nil
}

func count(got map[int]bool) int {
	n := 0
	for _, ok := range got {
		if ok {
			n++
		}
	}
	return n
}
