// Leader election with lockd's Go client: every copy of this program
// campaigns for one key; one leads at a time, the others wait and watch.
//
//	go run . -addr 127.0.0.1:7070 -key leader/demo -name node-a -hold 10s
//
// It prints who leads at every change (Observe), campaigns (Campaign),
// leads for -hold (0: until Ctrl-C) or until it loses leadership, then
// resigns so the next candidate takes over at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	lockd "lockd/clients/go"
)

func main() {
	addrs := flag.String("addr", "127.0.0.1:7070", "lockd node(s), comma-separated host:port")
	key := flag.String("key", "leader/demo", "the election's key")
	name := flag.String("name", "", "this candidate's value (1..64 visible ASCII bytes; default HOST:PID)")
	hold := flag.Duration("hold", 0, "lead this long, then resign (0: until Ctrl-C)")
	lease := flag.Duration("lease", 5*time.Second, "the leader's lease (a crashed leader blocks the next one this long)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := lockd.New(lockd.Options{Addresses: strings.Split(*addrs, ","), Owner: *name})
	if err != nil {
		fail(err)
	}
	defer c.Close()
	value := *name
	if value == "" {
		host, _ := os.Hostname()
		value = fmt.Sprintf("%s:%d", host, os.Getpid())
	}

	// Everyone watches who leads (W/V, protocol v1.3).
	if changes, err := c.Observe(ctx, *key); err != nil {
		fmt.Printf("%s: cannot observe %s: %v\n", value, *key, err)
	} else {
		go func() {
			for ld := range changes {
				if ld.Value == "" {
					fmt.Printf("%s: nobody leads %s\n", value, *key)
				} else {
					fmt.Printf("%s: %s leads %s (token %d)\n", value, ld.Value, *key, ld.Token)
				}
			}
		}()
	}

	fmt.Printf("%s: campaigning for %s\n", value, *key)
	l, err := c.Campaign(ctx, *key, value, lockd.CampaignOptions{Lease: *lease})
	if errors.Is(err, context.Canceled) {
		return
	}
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s: leading with token %d\n", value, l.Token)

	var done <-chan time.Time
	if *hold > 0 {
		done = time.After(*hold)
	}
	select {
	case <-l.Lost(): // X, N to a keep, or no keep confirmed in time
		fmt.Printf("%s: lost leadership: %v\n", value, l.Err())
		os.Exit(1)
	case <-done:
	case <-ctx.Done():
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Resign(rctx); err != nil {
		fail(err)
	}
	fmt.Printf("%s: resigned\n", value)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "leader_election:", err)
	os.Exit(1)
}
