package httpapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/metrics"
)

// TestFailedScrapeAnswersNoErrorText: a collector that fails is logged and
// left out; the scrape answers the rest, never the error's text, which
// could name the database (issue 13).
func TestFailedScrapeAnswersNoErrorText(t *testing.T) {
	t.Parallel()
	m := metrics.New(func(context.Context) (map[heraldtype.Lane]int, error) {
		return nil, errors.New("dial postgres://herald:s3cret@db.internal: connection refused")
	})
	srv := httptest.NewServer(httpapi.MetricsHandler(m, "", slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	res, err := testenv.HTTP.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || strings.Contains(string(body), "s3cret") || strings.Contains(string(body), "db.internal") ||
		!strings.Contains(string(body), "herald_notifications_accepted_total") {
		t.Fatalf("scrape with a failing collector: %d\n%s", res.StatusCode, body)
	}
}

// TestMetricsTokenIsSentOnce: with a token, a scrape that sends two
// Authorization headers, a wrong one and the token, is 400, as every other
// route answers it: which one counts would depend on who reads it.
func TestMetricsTokenIsSentOnce(t *testing.T) {
	t.Parallel()
	m := metrics.New(func(context.Context) (map[heraldtype.Lane]int, error) { return nil, nil })
	srv := httptest.NewServer(httpapi.MetricsHandler(m, "scrape-token", slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name    string
		headers []string
		want    int
	}{
		{"Once", []string{"Bearer scrape-token"}, http.StatusOK},
		{"TwiceTheSame", []string{"Bearer scrape-token", "Bearer scrape-token"}, http.StatusOK},
		{"AnotherFirst", []string{"Bearer wrong", "Bearer scrape-token"}, http.StatusBadRequest},
		{"AnotherLast", []string{"Bearer scrape-token", "Bearer wrong"}, http.StatusBadRequest},
	} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		for _, h := range tc.headers {
			req.Header.Add("Authorization", h)
		}
		res, err := testenv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, res.StatusCode, tc.want)
		}
	}
}
