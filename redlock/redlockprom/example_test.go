package redlockprom_test

import (
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"
	"quorumlock.dev/redlock/redlockprom"

	"quorumlock.dev/driver/goredis"
)

// One Metrics is the client's observer, the guard's hook and a collector.
func Example() {
	m, err := redlockprom.New("quorumlock")
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	var rdbs []*redis.Client
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		rdbs = append(rdbs, redis.NewClient(&redis.Options{Addr: addr}))
	}
	client, err := redlock.New(goredis.Masters(rdbs...), redlock.WithHooks(m.Hooks()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	guard := fence.RedisGuard{OnReject: m.FenceRejected}
	_ = guard

	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
