//go:build !unix

package app

// openFilesLimit is 0 (unknown) where there is no RLIMIT_NOFILE.
func openFilesLimit() uint64 { return 0 }
