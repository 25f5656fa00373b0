package valkeydriver

// Every file of this package that starts with "Code generated" is the
// rueidis adapter's (../rueidisdriver) with the client's names changed
// (internal/twin says which): make a change there, then run go generate
// here. TestGenerated fails when a generated file is stale.

//go:generate go run gen.go
