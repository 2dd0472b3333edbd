package valkeydlock

// The package is rueidisdlock with its names rewritten for valkey-go
// (see internal/genvalkey); TestGenerated fails when it is out of date.
//go:generate go run ./internal/genvalkey
