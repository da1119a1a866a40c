package testenv

import "net/http"

// HTTP is the client for tests' requests (to app.Run's listener, a herald
// child process, an httptest server). It has a transport of its own:
// httptest.Server.Close closes the idle connections of
// http.DefaultTransport, and a parallel test's request that had just taken
// one of them fails with "http: CloseIdleConnections called". An httptest
// server's own Client is as safe.
var HTTP = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
