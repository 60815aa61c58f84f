package protocol

// ByPlacement picks the anchor of p among the three an adapter resolved when it
// parsed a body, so that every adapter maps placements to anchors by one rule: ok is
// false for an unknown placement, and for AppendToTask and NewMessage when no task
// was found (hasTask false) — there is nothing to append to or to follow.
func ByPlacement[A any](p Placement, hasTask bool, system, appendToTask, newMessage A) (a A, ok bool) {
	switch p {
	case System:
		return system, true
	case AppendToTask:
		return appendToTask, hasTask
	case NewMessage:
		return newMessage, hasTask
	}
	return a, false
}
