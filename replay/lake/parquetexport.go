package lake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/camproxy/camproxy/replay"
)

// Partition columns of ExportParquetPartitioned. dt and hr (UTC) come from the
// episode's started_at; they are not columns of the files. arm, task_id and
// experiment (ExperimentOf's: the null partition for an episode that records none)
// are, and leave the files when they become directories (the Hive convention: an
// engine reading the directory tree adds them back from the path).
const (
	PartitionDate       = "dt"
	PartitionHour       = "hr"
	PartitionArm        = "arm"
	PartitionTask       = "task_id"
	PartitionExperiment = "experiment"
)

// hiveNull is the directory value of an empty partition value, as Hive and Spark
// write it; engines read it back as null.
const hiveNull = "__HIVE_DEFAULT_PARTITION__"

// ManifestName is the file an export writes last, listing its files: a destination
// without it holds an export that did not finish. Engines skip names that start with
// "_" (Spark, Arrow) or do not end in .parquet (a **/*.parquet glob).
const ManifestName = "_manifest.json"

// ManifestFormat names the layout and schema of a partitioned export.
const ManifestFormat = "camproxy.replay.parquet/1"

// ErrExportNotEmpty is returned when the destination already holds something: a
// second export into the same place would be read as one table with the first.
var ErrExportNotEmpty = errors.New("export destination is not empty")

// PartitionOptions tune ExportParquetPartitioned. Zero values take the defaults.
type PartitionOptions struct {
	// PartitionBy lists the directory levels, outermost first: dt, hr, arm, task_id
	// ("task" is read as task_id), experiment. None: every file directly in the
	// destination.
	PartitionBy []string
	// RowGroupRows ends a row group after this many rows; default 10 000.
	RowGroupRows int
	// RowGroupBytes ends a row group once its rows hold about this many bytes of
	// text (before encoding); default 32 MiB.
	RowGroupBytes int64
	// MemoryBytes bounds the text held in the row groups of all open files
	// together; past it the largest row group is written out early. Default 128 MiB.
	MemoryBytes int64
	// FileBytes starts a new part file once a file has this many bytes written
	// (checked at row group ends); default 256 MiB.
	FileBytes int64
	// MaxOpenFiles bounds the part files open at once (each writer costs about
	// 1.7 MB besides its rows); past it the least recently written one is finished,
	// and its partition gets a new part file if more of its rows come. Default 32.
	MaxOpenFiles int
}

// PartitionOptions defaults.
const (
	defaultRowGroupRows  = 10_000
	defaultRowGroupBytes = 32 << 20
	defaultMemoryBytes   = 128 << 20
	defaultFileBytes     = 256 << 20
	defaultMaxOpenFiles  = 32
)

// Validate reports every problem of the options at once.
func (o PartitionOptions) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for _, p := range o.PartitionBy {
		c := partitionColumn(p)
		switch {
		case c == "":
			errs = append(errs, fmt.Errorf("partition column %q: use dt, hr, arm, task_id or experiment", p))
		case seen[c]:
			errs = append(errs, fmt.Errorf("partition column %q given twice", p))
		}
		seen[c] = true
	}
	if o.RowGroupRows < 0 {
		errs = append(errs, fmt.Errorf("row group rows %d < 0", o.RowGroupRows))
	}
	if o.RowGroupBytes < 0 {
		errs = append(errs, fmt.Errorf("row group bytes %d < 0", o.RowGroupBytes))
	}
	if o.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("memory bytes %d < 0", o.MemoryBytes))
	}
	if o.FileBytes < 0 {
		errs = append(errs, fmt.Errorf("file bytes %d < 0", o.FileBytes))
	}
	if o.MaxOpenFiles < 0 {
		errs = append(errs, fmt.Errorf("max open files %d < 0", o.MaxOpenFiles))
	}
	return errors.Join(errs...)
}

// partitionColumn is the column a --partition-by name means, or "".
func partitionColumn(name string) string {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case PartitionDate:
		return PartitionDate
	case PartitionHour:
		return PartitionHour
	case PartitionArm:
		return PartitionArm
	case PartitionTask, "task":
		return PartitionTask
	case PartitionExperiment:
		return PartitionExperiment
	}
	return ""
}

func (o PartitionOptions) withDefaults() PartitionOptions {
	o.RowGroupRows = cmp.Or(o.RowGroupRows, defaultRowGroupRows)
	o.RowGroupBytes = cmp.Or(o.RowGroupBytes, defaultRowGroupBytes)
	o.MemoryBytes = cmp.Or(o.MemoryBytes, defaultMemoryBytes)
	o.FileBytes = cmp.Or(o.FileBytes, defaultFileBytes)
	o.MaxOpenFiles = cmp.Or(o.MaxOpenFiles, defaultMaxOpenFiles)
	cols := make([]string, len(o.PartitionBy))
	for i, p := range o.PartitionBy {
		cols[i] = partitionColumn(p)
	}
	o.PartitionBy = cols
	return o
}

// Manifest lists what an export wrote.
type Manifest struct {
	Format      string         `json:"format"`
	PartitionBy []string       `json:"partition_by"`
	Rows        int64          `json:"rows"`
	Files       []ManifestFile `json:"files"` // by path
}

// Partitions is how many partition directories hold the export's files.
func (m *Manifest) Partitions() int {
	dirs := map[string]bool{}
	for _, f := range m.Files {
		dirs[path.Dir(f.Path)] = true
	}
	return len(dirs)
}

// PartitionSummary says, for the person who ran a partitioned export, its partition
// columns (by, as given) and the episodes the read left out (sum).
func PartitionSummary(by []string, sum replay.Summary) string {
	s := "no partition columns"
	if len(by) > 0 {
		s = "by " + strings.Join(by, ", ")
	}
	if sum.Unselected > 0 || sum.Partial > 0 {
		s += fmt.Sprintf("; %d episodes not selected, %d cut by the window", sum.Unselected, sum.Partial)
	}
	return s
}

// ManifestFile is one part file: its path below the destination (slash-separated),
// its rows and its size.
type ManifestFile struct {
	Path  string `json:"path"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// EpisodeIter calls yield with each episode and stops at yield's first error, which
// it returns.
type EpisodeIter func(yield func(*replay.Episode) error) error

// ExportParquetPartitioned writes the episodes as Hive-partitioned Parquet files,
//
//	dt=2026-03-04/arm=control/part-00000.parquet
//
// in the schema of ExportParquet minus the partition columns arm, task_id and
// experiment (dt and hr are the episode's start, UTC). Values are escaped as Hive
// does ("/" is %2F, an empty value __HIVE_DEFAULT_PARTITION__). Part files are numbered across the
// export; each shows at its path only when complete, and the manifest (ManifestName)
// is written last. The destination must be empty: ErrExportNotEmpty otherwise.
//
// Memory is bounded by MemoryBytes of row groups plus MaxOpenFiles writers (and an
// episode), whatever the number of episodes or partitions.
func ExportParquetPartitioned(ctx context.Context, dest ExportDest, episodes EpisodeIter, o PartitionOptions) (Manifest, error) {
	if err := o.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("export parquet: %w", err)
	}
	o = o.withDefaults()
	empty, err := dest.Empty(ctx)
	if err != nil {
		return Manifest{}, fmt.Errorf("export parquet to %s: %w", dest, err)
	}
	if !empty {
		return Manifest{}, fmt.Errorf("export parquet to %s: %w (export into a new directory or prefix)", dest, ErrExportNotEmpty)
	}
	x := &partExporter{ctx: ctx, dest: dest, o: o, open: map[string]*partFile{}, schema: parquetSchemaWithout(o.PartitionBy),
		zstd: newExportZstd()}
	x.m = Manifest{Format: ManifestFormat, PartitionBy: o.PartitionBy, Files: []ManifestFile{}}
	if err := episodes(x.add); err != nil {
		x.abort()
		return Manifest{}, fmt.Errorf("export parquet to %s: %w", dest, err)
	}
	for _, key := range slices.Sorted(maps.Keys(x.open)) {
		if err := x.finish(key); err != nil {
			x.abort()
			return Manifest{}, fmt.Errorf("export parquet to %s: %w", dest, err)
		}
	}
	slices.SortFunc(x.m.Files, func(a, b ManifestFile) int { return strings.Compare(a.Path, b.Path) })
	if err := x.writeManifest(); err != nil {
		return Manifest{}, fmt.Errorf("export parquet to %s: %w", dest, err)
	}
	return x.m, nil
}

// partExporter is one export in progress.
type partExporter struct {
	ctx    context.Context
	dest   ExportDest
	o      PartitionOptions
	schema *parquet.Schema
	zstd   *exportZstd          // every part file's pages
	open   map[string]*partFile // by partition directory
	parts  int                  // part files started
	tick   uint64               // for least recently written
	held   int64                // text in the open files' row groups
	m      Manifest
}

// partFile is one part file being written.
type partFile struct {
	path     string
	out      ExportFile
	counted  *countWriter
	pw       *parquet.GenericWriter[parquetRow]
	rows     int64 // in the file
	groupRow int   // in the current row group
	groupLen int64 // text bytes in the current row group
	used     uint64
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (x *partExporter) add(e *replay.Episode) error {
	if err := x.ctx.Err(); err != nil {
		return err
	}
	dir := partitionDir(e, x.o.PartitionBy)
	f, err := x.file(dir)
	if err != nil {
		return err
	}
	row := toParquet(rowOf(e))
	if _, err := f.pw.Write([]parquetRow{row}); err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	x.tick++
	f.used = x.tick
	f.rows++
	f.groupRow++
	n := parquetRowBytes(&row)
	f.groupLen += n
	x.held += n
	x.m.Rows++
	if f.groupRow >= x.o.RowGroupRows || f.groupLen >= x.o.RowGroupBytes {
		if err := x.endRowGroup(dir, f); err != nil {
			return err
		}
	}
	for x.held > x.o.MemoryBytes {
		var big string
		for k, f := range x.open {
			if big == "" || f.groupLen > x.open[big].groupLen {
				big = k
			}
		}
		if err := x.endRowGroup(big, x.open[big]); err != nil {
			return err
		}
	}
	return nil
}

// endRowGroup writes out a file's row group, and finishes the file past FileBytes.
func (x *partExporter) endRowGroup(dir string, f *partFile) error {
	if err := f.pw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	x.held -= f.groupLen
	f.groupRow, f.groupLen = 0, 0
	if f.pw.Size() >= x.o.FileBytes {
		return x.finish(dir)
	}
	return nil
}

// file is the open part file of a partition, started if needed; past MaxOpenFiles
// the least recently written one is finished first.
func (x *partExporter) file(dir string) (*partFile, error) {
	if f := x.open[dir]; f != nil {
		return f, nil
	}
	if len(x.open) >= x.o.MaxOpenFiles {
		var lru string
		var used uint64
		for k, f := range x.open {
			if lru == "" || f.used < used {
				lru, used = k, f.used
			}
		}
		if err := x.finish(lru); err != nil {
			return nil, err
		}
	}
	name := fmt.Sprintf("part-%05d.parquet", x.parts)
	x.parts++
	path := name
	if dir != "" {
		path = dir + "/" + name
	}
	out, err := x.dest.Create(x.ctx, path)
	if err != nil {
		return nil, err
	}
	counted := &countWriter{w: out}
	f := &partFile{path: path, out: out, counted: counted, pw: parquet.NewGenericWriter[parquetRow](counted,
		x.schema, parquet.Compression(x.zstd), parquet.MaxRowsPerRowGroup(int64(x.o.RowGroupRows)),
		parquet.CreatedBy("camproxy", "", ""))}
	x.open[dir] = f
	return f, nil
}

// finish completes a partition's open part file and records it.
func (x *partExporter) finish(dir string) error {
	f := x.open[dir]
	delete(x.open, dir)
	x.held -= f.groupLen
	if err := f.pw.Close(); err != nil {
		f.out.Abort()
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := f.out.Close(); err != nil {
		return err
	}
	x.m.Files = append(x.m.Files, ManifestFile{Path: f.path, Rows: f.rows, Bytes: f.counted.n})
	return nil
}

// abort drops the part files still open; finished ones stay, without a manifest.
func (x *partExporter) abort() {
	for k, f := range x.open {
		f.out.Abort()
		delete(x.open, k)
	}
}

func (x *partExporter) writeManifest() error {
	b, err := json.MarshalIndent(x.m, "", "  ")
	if err != nil {
		return err
	}
	out, err := x.dest.Create(x.ctx, ManifestName)
	if err != nil {
		return err
	}
	if _, err := out.Write(append(b, '\n')); err != nil {
		out.Abort()
		return fmt.Errorf("write %s: %w", ManifestName, err)
	}
	return out.Close()
}

// exportZstd is parquet.Zstd with one encoder for a whole export. parquet.Zstd
// keeps its encoders in a sync.Pool, which a GC empties (and the race detector
// drops from at random), and a new encoder allocates ~15 MB of tables: an export
// of many small part files spent most of its time building encoders. The encoder
// takes the options parquet.Zstd gives its own (the same bytes come out), and its
// EncodeAll is safe for concurrent use. Decode is parquet.Zstd's.
type exportZstd struct {
	pqzstd.Codec
	enc *zstd.Encoder
}

func newExportZstd() *exportZstd {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(pqzstd.DefaultLevel),
		zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
	if err != nil {
		panic(err) // only for an invalid option
	}
	return &exportZstd{enc: enc}
}

func (c *exportZstd) Encode(dst, src []byte) ([]byte, error) {
	return c.enc.EncodeAll(src, dst[:0]), nil
}

// partitionDir is the episode's directory: "col=value/…" in the order of cols.
func partitionDir(e *replay.Episode, cols []string) string {
	if len(cols) == 0 {
		return ""
	}
	var b strings.Builder
	at := e.StartedAt.UTC()
	for i, c := range cols {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(c)
		b.WriteByte('=')
		switch c {
		case PartitionDate:
			b.WriteString(hiveDate(at))
		case PartitionHour:
			b.WriteString(hiveHour(at))
		case PartitionArm:
			b.WriteString(hiveEscape(e.Arm))
		case PartitionTask:
			b.WriteString(hiveEscape(e.TaskID))
		case PartitionExperiment:
			b.WriteString(hiveEscape(replay.ExperimentOf(e)))
		}
	}
	return b.String()
}

// hiveDate and hiveHour are the dt and hr of a start time; an episode without one
// (it cannot be dated) is in the null partition.
func hiveDate(t time.Time) string {
	if t.IsZero() {
		return hiveNull
	}
	return t.Format(time.DateOnly)
}

func hiveHour(t time.Time) string {
	if t.IsZero() {
		return hiveNull
	}
	return t.Format("15") // the hour, two digits
}

// hiveEscape escapes a partition value as Hive's FileUtils.escapePathName does: the
// bytes below 0x20, 0x7F and "#%'*/:=?\{[]^ become %XX (upper case); "" is the
// null partition.
func hiveEscape(s string) string {
	if s == "" {
		return hiveNull
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if hiveEscapes(c) {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(strconv.FormatUint(uint64(c)>>4, 16) + strconv.FormatUint(uint64(c)&15, 16)))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func hiveEscapes(c byte) bool {
	return c < 0x20 || c == 0x7F || strings.IndexByte("\"#%'*/:=?\\{[]^", c) >= 0
}

// hiveUnescape reverses hiveEscape as Hive reads a path: %XX with two hex digits is
// the byte, any other "%" stays; the null partition is "".
func hiveUnescape(s string) string {
	if s == hiveNull {
		return ""
	}
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseHivePath reads the partition values of a file's path below an export's root
// ("dt=2026-03-04/arm=a%2Fb/part-00000.parquet" → dt, arm): the directories must all
// be col=value.
func parseHivePath(path string) ([][2]string, error) {
	segs := strings.Split(path, "/")
	var out [][2]string
	for _, s := range segs[:len(segs)-1] {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not a partition directory (col=value)", s)
		}
		out = append(out, [2]string{hiveUnescape(k), hiveUnescape(v)})
	}
	return out, nil
}

// parquetSchemaWithout is the export schema minus the given columns, in the
// columns' usual order. parquet-go writes a parquetRow into it by field name.
func parquetSchemaWithout(drop []string) *parquet.Schema {
	full := parquet.SchemaOf(parquetRow{})
	var fields []parquet.Field
	for _, f := range full.Fields() {
		if !slices.Contains(drop, f.Name()) {
			fields = append(fields, f)
		}
	}
	if len(fields) == len(full.Fields()) {
		return full
	}
	return parquet.NewSchema(full.Name(), fieldsNode{Node: full, fields: fields})
}

// fieldsNode is a group node with some of another group's fields.
type fieldsNode struct {
	parquet.Node
	fields []parquet.Field
}

func (n fieldsNode) Fields() []parquet.Field { return n.fields }

// parquetRowBytes estimates the text a row adds to a row group before encoding:
// enough to bound a row group's memory, not an exact size.
func parquetRowBytes(r *parquetRow) int64 {
	n := len(r.EpisodeID) + len(r.TaskID) + len(r.Task) + len(r.Experiment) + len(r.Arm) + len(r.Context) + 64
	for _, m := range r.Messages {
		n += len(m.Role) + len(m.Content) + len(m.ToolCallID) + len(m.Name) + 32
		for _, tc := range m.ToolCalls {
			n += len(tc.ID) + len(tc.Type) + 32
			if tc.Function != nil {
				n += len(tc.Function.Name) + len(tc.Function.Arguments)
			}
			if tc.Custom != nil {
				n += len(tc.Custom.Name) + len(tc.Custom.Input)
			}
		}
		for _, p := range m.ContentParts {
			n += len(p.Type) + 32
			for _, s := range []*string{p.Text, p.Raw} {
				if s != nil {
					n += len(*s)
				}
			}
			for _, md := range []*parquetMedia{p.ImageURL, p.InputAudio, p.File} {
				if md != nil && md.Data != nil {
					n += len(*md.Data)
				}
				if md != nil && md.URL != nil {
					n += len(*md.URL)
				}
			}
		}
		for _, raw := range m.Raw {
			n += len(raw)
		}
	}
	return int64(n)
}
