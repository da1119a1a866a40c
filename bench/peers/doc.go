// Package peers measures herald beside the job queues and outboxes its
// users would otherwise build on, on the same PostgreSQL in the same run, so
// that every figure is a ratio to a peer measured a moment before or after
// it. It is its own module, so herald itself does not depend on the peers.
//
// The Go API (issue 12): herald's Client.Enqueue and River's Insert, each
// one transaction per item from 8 goroutines, timed end to end (from the
// first enqueue until the last item is worked: herald's provider call,
// River's no-op job), with the latency from an enqueue's commit to its
// provider call or job. Run the pairs alternately, as the machine is
// shared and noisy:
//
//	cd bench/peers
//	for i in 1 2 3; do go test -run '^$' -bench 'GoAPI' -benchtime 20000x; done
//
// A campaign's drain (issue 12): BenchmarkDrainHerald starts a campaign of
// b.N recipients (added first through the HTTP API) on PostgreSQL with the
// db transport and a 0 ms provider, timed from the start until the last
// send is recorded (the leader's fan-out and the sends overlap);
// BenchmarkDrainRiver batch-inserts as many no-op jobs (InsertManyFast,
// 10,000 a call) and times River's client, as tuned for the Go API, from
// its start until the last is worked. benchrun's campaign scenario runs
// the pair and prints herald's sent/s over River's worked/s:
//
//	go run ./bench/cmd/benchrun -count 3 campaign    # from herald's root
//
// PostgreSQL + RabbitMQ (issue 12): herald's BenchmarkEndToEndRabbitMQ (in
// bench: 16 HTTP clients, the relay to a quorum queue with confirms, the
// lane consumer, a 0 ms provider) beside BenchmarkWatermillOutbox here:
// Watermill's outbox, 16 producers each inserting one message through
// watermill-sql's publisher in its own transaction, the forwarder moving
// them to a RabbitMQ quorum queue with publisher confirms, a consumer
// acking each; both timed from the first write until the last message is
// handled. Its doc says how Watermill is tuned. benchrun runs the pair in
// turn and prints the ratio:
//
//	go run ./bench/cmd/benchrun -count 3 outbox    # from herald's root
//
// HERALD_BENCH_POSTGRES_URL names the server (default
// postgres://postgres@127.0.0.1:5432/postgres); each benchmark creates and
// drops a database of its own there. The outbox benchmark makes a vhost of
// its own on the broker of HERALD_TEST_RABBITMQ_URL (default
// amqp://guest:guest@127.0.0.1:5672/) with rabbitmqctl, as herald's does,
// and deletes it after.
package peers
