package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
)

// memStore is the fenced storage the workers write to: per resource a row that keeps the
// largest fence it has seen and the jobs recorded on it, and a shadow row that takes the same
// jobs without any check. It lives in the coordinator and is served over HTTP on loopback,
// so that workers in other processes share it and survive its client's death.
type memStore struct {
	mu     sync.Mutex
	rows   map[string]*row
	shadow map[string][]chaoscheck.Entry

	srv *http.Server
	url string
}

type row struct {
	fence uint64
	jobs  []chaoscheck.Entry
}

func startMemStore() (*memStore, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: store: %w", err)
	}
	s := &memStore{rows: map[string]*row{}, shadow: map[string][]chaoscheck.Entry{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /claim", s.handle(s.claim))
	mux.HandleFunc("POST /write", s.handle(s.write))
	mux.HandleFunc("POST /shadow-read", s.handle(s.shadowRead))
	mux.HandleFunc("POST /shadow-write", s.handle(s.shadowWrite))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.url = "http://" + ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *memStore) close() { _ = s.srv.Close() }

// call is one request: resource, fence, job, worker; the answer is an outcome and a job.
type call struct {
	res    string
	fence  uint64
	job    int64
	worker int
}

type answer struct {
	Outcome chaoscheck.Outcome `json:"outcome"`
	Job     int64              `json:"job"`
}

func (s *memStore) handle(f func(call) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		c := call{res: q.Get("res")}
		c.fence, _ = strconv.ParseUint(q.Get("fence"), 10, 64)
		c.job, _ = strconv.ParseInt(q.Get("job"), 10, 64)
		c.worker, _ = strconv.Atoi(q.Get("worker"))
		s.mu.Lock()
		a := f(c)
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(a)
	}
}

func (s *memStore) rowOf(res string) *row {
	r := s.rows[res]
	if r == nil {
		r = &row{}
		s.rows[res] = r
	}
	return r
}

func (s *memStore) claim(c call) answer {
	r := s.rowOf(c.res)
	if c.fence < r.fence {
		return answer{Outcome: chaoscheck.Rejected}
	}
	r.fence = c.fence
	return answer{Outcome: chaoscheck.OK, Job: int64(len(r.jobs))}
}

func (s *memStore) write(c call) answer {
	r := s.rowOf(c.res)
	if c.fence < r.fence {
		return answer{Outcome: chaoscheck.Rejected}
	}
	r.fence = c.fence
	r.jobs = append(r.jobs, chaoscheck.Entry{Job: c.job, Fence: c.fence, Worker: c.worker})
	return answer{Outcome: chaoscheck.OK}
}

// The row's next job is the count of jobs recorded on it, so a write of job N makes it N+1
// exactly when N was the next one; a stale holder's write of an old N is a duplicate.
func (s *memStore) shadowRead(c call) answer {
	return answer{Outcome: chaoscheck.OK, Job: int64(len(s.shadow[c.res]))}
}

func (s *memStore) shadowWrite(c call) answer {
	s.shadow[c.res] = append(s.shadow[c.res], chaoscheck.Entry{Job: c.job, Worker: c.worker})
	return answer{Outcome: chaoscheck.OK}
}

// final is what the store holds.
func (s *memStore) final() chaoscheck.Final {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := chaoscheck.Final{Fenced: map[string][]chaoscheck.Entry{}, Shadow: map[string][]chaoscheck.Entry{}}
	for res, r := range s.rows {
		f.Fenced[res] = append([]chaoscheck.Entry(nil), r.jobs...)
	}
	for res, jobs := range s.shadow {
		f.Shadow[res] = append([]chaoscheck.Entry(nil), jobs...)
	}
	return f
}

// backend is where a worker's store calls go: the coordinator's memStore over HTTP, or
// PostgreSQL. ok reports the outcome; err means no answer (it may have taken effect).
type backend interface {
	call(ctx context.Context, kind string, res string, f uint64, job int64, worker int) (answer, error)
}

// httpBackend reaches the coordinator's memStore.
type httpBackend struct {
	base string
	http *http.Client
}

func (b httpBackend) call(ctx context.Context, kind string, res string, f uint64, job int64, worker int) (answer, error) {
	q := url.Values{"res": {res}, "fence": {strconv.FormatUint(f, 10)}, "job": {strconv.FormatInt(job, 10)}, "worker": {strconv.Itoa(worker)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/"+kind+"?"+q.Encode(), nil)
	if err != nil {
		return answer{}, err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return answer{}, err
	}
	return a, nil
}

// storeClient is a worker's side of the store. Fenced calls are recorded: a call event before
// the request, a ret event after it, so that a call cut short by a kill is still in the history.
type storeClient struct {
	b      backend
	worker int
	seq    *atomic.Int64 // call ids, shared by the worker's loops
}

// recorded runs one fenced call and records it.
func (c *storeClient) recorded(out *emitter, kind chaoscheck.OpKind, res string, f uint64, job int64) answer {
	id := int(c.seq.Add(1))
	op := chaoscheck.Op{Worker: c.worker, Resource: res, Kind: kind, Fence: f, Job: job, Call: time.Now().UnixNano()}
	out.emit(event{Kind: "call", ID: id, Op: &op})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	a, err := c.b.call(ctx, string(kind), res, f, job, c.worker)
	cancel()
	op.Return = time.Now().UnixNano()
	op.Outcome = a.Outcome
	if err != nil {
		op.Outcome = chaoscheck.Unknown
	}
	if kind == chaoscheck.Claim {
		op.Job = a.Job
	}
	out.emit(event{Kind: "ret", ID: id, Op: &op})
	return a
}

// claim takes the row for f and returns its next job; ok is false when the row refused f.
func (c *storeClient) claim(out *emitter, res string, f uint64) (job int64, ok bool) {
	a := c.recorded(out, chaoscheck.Claim, res, f, 0)
	return a.Job, a.Outcome == chaoscheck.OK
}

func (c *storeClient) write(out *emitter, res string, f uint64, job int64) {
	c.recorded(out, chaoscheck.Write, res, f, job)
}

// shadowRead returns the shadow row's next job; ok is false when the store did not answer.
func (c *storeClient) shadowRead(res string) (int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := c.b.call(ctx, "shadow-read", res, 0, 0, c.worker)
	return a.Job, err == nil
}

func (c *storeClient) shadowWrite(res string, job int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.b.call(ctx, "shadow-write", res, 0, job, c.worker)
}
