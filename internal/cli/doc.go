// Package cli owns how camproxy's commands meet the command line, over cobra: the
// tree's usage and help, flag problems found before cobra parses (an unknown flag
// with the one probably meant, a value its flag refuses), a command's checks
// reported with them all at once, choice flags and what the shell completes, and
// the exit status of an error (Usagef: 2; ExitStatus: a launched tool's). The
// command tree itself, and what each command does, are cmd/camproxy's.
package cli
