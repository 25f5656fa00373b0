// Package embeddedredis runs in-process Redis servers (miniredis) whose keys
// expire in real time, as a real server's do. miniredis alone expires keys
// only when told to (FastForward), so a lock whose holder paused would never
// lapse, and the failures the fence exists for could not happen.
package embeddedredis

import (
	"time"

	"github.com/alicebob/miniredis/v2"
)

// tick is how often the server's clock is moved on: TTLs are this precise.
const tick = time.Millisecond

// Server is a miniredis with a real-time clock for expiry.
type Server struct {
	*miniredis.Miniredis
	stop chan struct{}
	done chan struct{}
}

// Start runs a server on a free loopback port.
func Start() (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	s := &Server{Miniredis: m, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s, nil
}

func (s *Server) run() {
	defer close(s.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case now := <-t.C:
			s.FastForward(now.Sub(last))
			last = now
		case <-s.stop:
			return
		}
	}
}

// Close stops the clock and the server.
func (s *Server) Close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	<-s.done
	s.Miniredis.Close()
}
