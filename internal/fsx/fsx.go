// Package fsx holds the file-system step that the replay buffer's file sink, the
// export's directory destination and the playbook's directory store share.
package fsx

import "os"

// SyncDir makes dir's entries durable (a file just created or renamed into it), so
// that data already fsynced is not lost with its name in a crash. Best effort: some
// file systems refuse fsync on a directory, and the data itself is synced already.
func SyncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
