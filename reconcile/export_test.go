package reconcile

import "time"

// OnCheck makes r's Loop check every 5 milliseconds and call f after each
// check.
func OnCheck(r *Reconciler, f func()) { r.checked, r.checkEvery = f, 5*time.Millisecond }
