package report

import (
	"io"
	"path/filepath"
	"strings"
)

// The formats a report is written in.
const (
	FormatText = "text"
	FormatJSON = "json"
	FormatHTML = "html"
)

// FormatOf is the format a report written to path takes when none is asked for: by
// its extension, html for .html or .htm, json for .json, else text.
func FormatOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".html", ".htm":
		return FormatHTML
	case ".json":
		return FormatJSON
	}
	return FormatText
}

// Write writes rs in format (FormatText, FormatJSON or FormatHTML; anything else is
// text).
func (rs Reports) Write(w io.Writer, format string) error {
	switch format {
	case FormatJSON:
		return rs.WriteJSON(w)
	case FormatHTML:
		return rs.WriteHTML(w)
	}
	return rs.WriteText(w)
}
