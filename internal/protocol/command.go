package protocol

import "github.com/dlock-go/dlock/driver"

// The driver seam (package driver) is what a Client reaches Redis
// through; these build its values.

// FailedReply returns a reply that failed with err.
func FailedReply(err error) driver.Reply { return driver.Reply{Err: err} }

// Cmd makes a command without keys.
func Cmd(args ...any) driver.Command { return driver.Command{Args: args} }

// Keyed makes a command whose key is its second word (GET key, PTTL key).
func Keyed(args ...any) driver.Command { return driver.Command{Args: args, FirstKey: 1, Keys: 1} }

// ScriptCommand makes EVALSHA sha (or EVAL src) with keys and args.
// boxed, when set, is keys made interfaces already (as is shaOrSrc): a
// string made one costs an allocation.
func ScriptCommand(name string, shaOrSrc any, keys []string, boxed []any, args []any) driver.Command {
	n := len(keys)
	if boxed != nil {
		n = len(boxed)
	}
	words := make([]any, 0, 3+n+len(args))
	words = append(words, name, shaOrSrc, n)
	if boxed != nil {
		words = append(words, boxed...)
	} else {
		for _, k := range keys {
			words = append(words, k)
		}
	}
	words = append(words, args...)
	return driver.Command{Args: words, FirstKey: 3, Keys: n}
}
