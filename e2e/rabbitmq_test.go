package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
)

// TestCrashPostgresRabbitMQ is the spine's SIGKILL test on the production
// shape: PostgreSQL (a fresh database) and the rabbitmq transport (a fresh
// vhost). Kills land anywhere: between claim and publish, between confirm
// and mark, between the provider call and the ack.
func TestCrashPostgresRabbitMQ(t *testing.T) {
	skipShort(t, "crash test")
	t.Parallel()
	db := testpg.Database(t)
	mq := testmq.VHost(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	runCrash(t, crashSetup{
		database: db,
		// The lease (5s) must outlast the confirm timeout.
		extra: fmt.Sprintf("transport: rabbitmq\nrabbitmq_url: %s\nrabbitmq: {confirm_timeout: 2s}\n", mq),
	}, 2000, 5, seed)
}
