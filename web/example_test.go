package web_test

import (
	"log"
	"net/http"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/web"
	"github.com/redis/go-redis/v9"
)

// ExampleNew serves the live page of the locks under the prefix "shop",
// their metrics (with series of its own for orders/42) and their JSON,
// under /dlock/, read-only.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	c, err := dlock.New(rdb, dlock.WithPrefix("shop"))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/dlock/", http.StripPrefix("/dlock", web.New(c, web.Options{
		MetricNames: []string{"orders/42"},
		Refresh:     2 * time.Second,
	})))
	srv := &http.Server{Addr: "127.0.0.1:7373", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
