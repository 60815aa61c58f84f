package replay

// CheckURI reports what is wrong with a replay URI (wrapping ErrBadURI), or nil. It
// makes no network call: a command line is checked before any work starts.
func CheckURI(uri string) error {
	_, err := parseURI(uri)
	return err
}
