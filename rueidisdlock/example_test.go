package rueidisdlock_test

import (
	"context"
	"log"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/rueidis"
)

// The application's rueidis client, and dlock on it. (Not run: it needs a
// server at localhost:6379.)
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // after the dlock Client

	locks, err := rueidisdlock.New(client, dlock.WithPrefix("myapp"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close() // releases what it still holds

	ctx := context.Background()
	lease, err := locks.Mutex("orders/42").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	// ... work while lease.Done() is open ...
}
