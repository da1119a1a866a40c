package app

import (
	"fmt"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
)

// The open files limit (RLIMIT_NOFILE) is shared by everything herald
// opens: the API listener's connections, the providers' connections (one
// per send in flight, at most every lane's concurrency), the store's
// connections and files, the broker's. A listener let take
// server.max_connections past what the limit leaves takes the last
// descriptors under a burst of clients; then the store cannot open a file
// (intake answers 503) and a provider call cannot dial, which the sender
// takes for the provider's refusal (CONNECTION_FAILED): the send's quick
// tries are spent and it waits for the slow ones, 10 minutes apart. (The
// resources walk: 500 clients against a limit of 64 left 30,993 accepted
// sends waiting 10 minutes while the provider was up.) So the listener
// takes at most what the limit leaves after the rest; the connections
// beyond wait in the kernel's accept queue, as they do past
// max_connections, and herald refuses to start under a limit that leaves
// the listener fewer than minListenerConns.

// filesReserved is what herald keeps, beside its lanes' sends, for the
// store's connections and files, the broker, the metrics listener, the
// standard streams and the runtime.
const filesReserved = 64

// minListenerConns is the fewest API connections herald starts with.
const minListenerConns = 16

// listenerConns is the cap on the API listener's connections: cfg's
// server.max_connections, or what openFiles leaves after the lanes' sends
// and filesReserved when that is less (lowered true). openFiles 0 means
// unknown: no cap but the config's. It fails when the limit leaves fewer
// than minListenerConns.
func listenerConns(cfg *config.Config, openFiles uint64) (conns int, lowered bool, err error) {
	conns = cfg.Server.MaxConnections
	if openFiles == 0 {
		return conns, false, nil
	}
	sends := 0
	for _, l := range heraldtype.Lanes {
		sends += cfg.Lanes[string(l)].Concurrency
	}
	need := uint64(sends + filesReserved + minListenerConns)
	if openFiles < need {
		return 0, false, fmt.Errorf("the open files limit (%d) is below the %d herald needs: %d for its lanes' sends, %d for the store and the rest, %d for API connections; raise it (ulimit -n, systemd's LimitNOFILE)",
			openFiles, need, sends, filesReserved, minListenerConns)
	}
	if left := int(min(openFiles-uint64(sends+filesReserved), uint64(conns))); left < conns {
		return left, true, nil
	}
	return conns, false, nil
}
