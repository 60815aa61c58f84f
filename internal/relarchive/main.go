// Command relarchive writes a release archive whose bytes depend only on the files'
// names, contents and executable bits and on one time: a .tar.gz (names sorted,
// owner 0:0 without names, ustar headers, every mtime the given time, a gzip header
// with no name or time) or a .zip (the same, deflated). tar, gzip and zip differ
// between machines and versions; Go's own writers, at the version go.mod pins, do
// not, so scripts/release-build.sh archives with this and two machines agree.
//
//	go run ./internal/relarchive -mtime UNIX_SECONDS -o DIR/NAME.tar.gz|NAME.zip -C DIR NAME
package main

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/flate"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "relarchive:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("relarchive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "the archive to write: NAME.tar.gz or NAME.zip")
	dir := fs.String("C", ".", "the directory NAME is in")
	mtime := fs.Int64("mtime", 0, "every entry's modification time, in Unix seconds (SOURCE_DATE_EPOCH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *out == "" {
		return errors.New("usage: relarchive -mtime SECONDS -o ARCHIVE -C DIR NAME")
	}
	files, err := collect(os.DirFS(*dir), fs.Arg(0))
	if err != nil {
		return err
	}
	return write(*out, os.DirFS(*dir), files, time.Unix(*mtime, 0).UTC())
}

// file is one entry: a slash path under the archive's root, and whether it is a
// directory or an executable.
type file struct {
	name      string
	dir, exec bool
}

// collect lists root and everything under it in lexical order (WalkDir's), which
// is the order the archive keeps.
func collect(fsys fs.FS, root string) ([]file, error) {
	var files []file
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			files = append(files, file{name: p, dir: true})
		case info.Mode().IsRegular():
			files = append(files, file{name: p, exec: info.Mode()&0o111 != 0})
		default:
			return fmt.Errorf("%s: only files and directories go into a release archive", p)
		}
		return nil
	})
	return files, err
}

func (f file) mode() int64 {
	if f.dir || f.exec {
		return 0o755
	}
	return 0o644
}

func write(out string, fsys fs.FS, files []file, mtime time.Time) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(out), ".relarchive-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriter(tmp)
	switch {
	case strings.HasSuffix(out, ".tar.gz"):
		err = writeTarGz(w, fsys, files, mtime)
	case strings.HasSuffix(out, ".zip"):
		err = writeZip(w, fsys, files, mtime)
	default:
		err = fmt.Errorf("%s: want .tar.gz or .zip", out)
	}
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

func writeTarGz(w io.Writer, fsys fs.FS, files []file, mtime time.Time) error {
	zw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression) // Header: no name, no time; Best costs 3× the time for ~5%
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode(), ModTime: mtime, Format: tar.FormatUSTAR, Typeflag: tar.TypeReg}
		var b []byte
		if f.dir {
			h.Name, h.Typeflag = f.name+"/", tar.TypeDir
		} else if b, err = fs.ReadFile(fsys, f.name); err != nil {
			return err
		}
		h.Size = int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func writeZip(w io.Writer, fsys fs.FS, files []file, mtime time.Time) error {
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(w, flate.DefaultCompression)
	})
	for _, f := range files {
		h := &zip.FileHeader{Name: path.Clean(f.name), Method: zip.Deflate, Modified: mtime}
		h.SetMode(fs.FileMode(f.mode()))
		if f.dir {
			h.Name += "/"
			h.Method = zip.Store
			h.SetMode(fs.ModeDir | 0o755)
		}
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if f.dir {
			continue
		}
		b, err := fs.ReadFile(fsys, f.name)
		if err != nil {
			return err
		}
		if _, err := fw.Write(b); err != nil {
			return err
		}
	}
	return zw.Close()
}
