package postgres_test

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	testpg.Require(t)
	storetest.Run(t, storetest.Harness{Open: func(t *testing.T, clk clock.Clock) store.Store {
		// A fresh schema per test; it is dropped after the store closes.
		url := testpg.Schema(t)
		s, err := postgres.Open(context.Background(), url, postgres.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}})
}
