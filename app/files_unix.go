//go:build unix

package app

import "syscall"

// openFilesLimit is the process's open files limit (its soft
// RLIMIT_NOFILE, which Go raises to the hard one at start); 0 when it
// cannot be read or is unlimited.
func openFilesLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<40 {
		return 0
	}
	return uint64(l.Cur)
}
