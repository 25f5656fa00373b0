package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/cmd/redlock-bench/internal/benchrun"
	"quorumlock.dev/cmd/redlock-bench/internal/chaos"
)

func main() {
	// The chaos subcommand's workers, and those of the contended scenario's
	// -procs rows, are this program started again.
	chaos.MaybeWorker()
	benchrun.MaybeWorker()
	// go-redis logs every failed dial to stderr; the dead scenario dials
	// dead masters on purpose, and errors reach the report anyway.
	redis.SetLogger(silent{})
	// Ctrl-C ends the measuring; the servers the run started are still
	// stopped before the command exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}
