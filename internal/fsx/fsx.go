// Package fsx holds the file-system steps that more than one package shares: making
// a directory's entries durable (the replay buffer's file sink, the export's
// directory destination, the playbook's directory store) and writing a file whole
// or not at all (the command's export and report files, the trainer's datasets).
package fsx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

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

// WriteFileAtomic writes path through a temporary file in the same directory and
// renames it into place (mode 0644), so a failed write never leaves a truncated
// file that looks whole. write's error is returned as is.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	return WriteFile(path, 0o644, write)
}

// WriteFile is WriteFileAtomic with the file's mode, its data and its name made
// durable (fsync of the file, then of its directory) before it returns: a crash
// leaves the old file or the new one, whole.
func WriteFile(path string, mode os.FileMode, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	// CreateTemp's 0600 is for secrets; Sync before the rename so the new name never
	// points at data still in the page cache.
	if err := errors.Join(tmp.Chmod(mode), tmp.Sync()); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	SyncDir(filepath.Dir(path))
	return nil
}
