package chaosstore

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"quorumlock.dev/cmd/redlock-bench/internal/chaoscheck"
)

// memStore is the store in memory, served over HTTP on loopback.
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

func (s *memStore) handle(f func(call) Answer) http.HandlerFunc {
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

func (s *memStore) claim(c call) Answer {
	r := s.rowOf(c.res)
	if c.fence < r.fence {
		return Answer{Outcome: chaoscheck.Rejected}
	}
	r.fence = c.fence
	return Answer{Outcome: chaoscheck.OK, Job: int64(len(r.jobs))}
}

func (s *memStore) write(c call) Answer {
	r := s.rowOf(c.res)
	if c.fence < r.fence {
		return Answer{Outcome: chaoscheck.Rejected}
	}
	r.fence = c.fence
	r.jobs = append(r.jobs, chaoscheck.Entry{Job: c.job, Fence: c.fence, Worker: c.worker})
	return Answer{Outcome: chaoscheck.OK}
}

// The row's next job is the count of jobs recorded on it, so a write of job N makes it N+1
// exactly when N was the next one; a stale holder's write of an old N is a duplicate.
func (s *memStore) shadowRead(c call) Answer {
	return Answer{Outcome: chaoscheck.OK, Job: int64(len(s.shadow[c.res]))}
}

func (s *memStore) shadowWrite(c call) Answer {
	s.shadow[c.res] = append(s.shadow[c.res], chaoscheck.Entry{Job: c.job, Worker: c.worker})
	return Answer{Outcome: chaoscheck.OK}
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

// httpBackend reaches the coordinator's memStore.
type httpBackend struct {
	base string
	http *http.Client
}

func (b httpBackend) Call(ctx context.Context, kind string, res string, f uint64, job int64, worker int) (Answer, error) {
	q := url.Values{"res": {res}, "fence": {strconv.FormatUint(f, 10)}, "job": {strconv.FormatInt(job, 10)}, "worker": {strconv.Itoa(worker)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/"+kind+"?"+q.Encode(), nil)
	if err != nil {
		return Answer{}, err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	var a Answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return Answer{}, err
	}
	return a, nil
}
