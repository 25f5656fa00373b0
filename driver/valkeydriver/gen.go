//go:build ignore

// gen writes the valkey-go adapter's generated files from the rueidis
// adapter's, in ../rueidisdriver: run by go generate in this directory.
package main

import (
	"log"

	"quorumlock.dev/driver/valkeydriver/internal/twin"
)

func main() {
	if err := twin.Write(".", "../rueidisdriver"); err != nil {
		log.Fatal(err)
	}
}
