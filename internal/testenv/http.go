package testenv

import "net/http"

// HTTP is the client for tests' requests to servers they did not start
// with httptest (app.Run's listener, a herald child process). It has a
// transport of its own: httptest.Server.Close closes the idle connections
// of http.DefaultTransport, and a parallel test's request that had just
// taken one of them fails with "http: CloseIdleConnections called". For
// an httptest server, use its Client.
var HTTP = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
