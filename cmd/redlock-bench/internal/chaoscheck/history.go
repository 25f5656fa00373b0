// Package chaoscheck judges what the chaos suite's workers did: from the record of every lock
// holding and every call to the fenced storage, it counts the failures a lock can let through
// (overlapping holdings, fences handed out twice, stale writes, duplicate and lost writes) and
// checks the storage's history for linearizability with porcupine. It starts no servers and
// injects no faults; package chaos does both and hands the record here.
package chaoscheck

// Times are Unix nanoseconds of the machine's wall clock (time.Now().UnixNano()), which every
// worker process on one machine shares. 0 means "did not happen" (a process killed mid-call).

// Holding is one won lock, as its holder saw it.
type Holding struct {
	Worker   int    `json:"worker"`
	Resource string `json:"resource"`
	Fence    uint64 `json:"fence"` // 0: the run took no fences
	Token    string `json:"token"`
	Acquired int64  `json:"acquired"` // after the quorum was reached (TryLock returned)
	Until    int64  `json:"until"`    // the end of the validity the client computed
	Released int64  `json:"released"` // when the holder began to release; 0: never (killed)
}

// End is when the holding stopped counting: its release, or its validity's end if that came
// first or it was never released.
func (h Holding) End() int64 {
	if h.Released != 0 && h.Released < h.Until {
		return h.Released
	}
	return h.Until
}

// OpKind is a call to the fenced storage.
type OpKind string

const (
	// Claim takes a resource's row for Fence (refused if the row holds a larger fence) and
	// returns the row's next job number in Job.
	Claim OpKind = "claim"
	// Write records job Job on the resource's row with Fence (refused if the row holds a larger
	// fence); the row's next job number becomes Job+1.
	Write OpKind = "write"
)

// Outcome is what a storage call returned.
type Outcome string

const (
	OK       Outcome = "ok"
	Rejected Outcome = "rejected" // a larger fence was on the row: nothing changed
	Unknown  Outcome = "unknown"  // an error or no answer: it may or may not have taken effect
)

// Op is one call to the fenced storage.
type Op struct {
	Worker   int     `json:"worker"`
	Resource string  `json:"resource"`
	Kind     OpKind  `json:"kind"`
	Fence    uint64  `json:"fence"`
	Job      int64   `json:"job"` // Claim: what it returned (valid when OK); Write: the job written
	Call     int64   `json:"call"`
	Return   int64   `json:"return"` // 0: no answer (Outcome is then Unknown)
	Outcome  Outcome `json:"outcome"`
}

// Entry is one job the storage recorded for a resource, in the order it recorded them.
type Entry struct {
	Job    int64  `json:"job"`
	Fence  uint64 `json:"fence"`
	Worker int    `json:"worker"`
}

// Final is what the storage holds when the run is over, per resource.
type Final struct {
	Fenced map[string][]Entry // the fenced rows' job records
	Shadow map[string][]Entry // the same jobs written without a fence: what the lock alone does
}

// History is everything one run recorded.
type History struct {
	Holdings []Holding
	Ops      []Op // the fenced storage's calls, in any order
	Final    Final
}
