package algorithm

// Window is the number of permits granted (or reserved) in the window of the
// clock's grid that starts at Start. Fixed-window and sliding-counter states
// are short lists of them, oldest first.
type Window struct {
	Start   int64
	Permits int64
}

// WindowStart is the start of the window of length interval holding t: the
// grid is aligned to the Unix epoch, so intervals of a second, minute, hour
// or day start on the clock's whole seconds, minutes, hours and UTC days.
func WindowStart(t, interval int64) int64 {
	return t - t%interval
}

// Windows is a list of windows, oldest first, with the helpers the
// window-based algorithms share.
type Windows []Window

// Sum is the permits of the windows that start in [from, to).
func (ws Windows) Sum(from, to int64) int64 {
	var n int64
	for _, w := range ws {
		if w.Start >= from && w.Start < to {
			n += w.Permits
		}
	}
	return n
}

// DropBefore removes the windows that start before t.
func (ws Windows) DropBefore(t int64) Windows {
	i := 0
	for i < len(ws) && ws[i].Start < t {
		i++
	}
	if i == len(ws) {
		return nil
	}
	return ws[i:]
}

// Add counts n permits in the window starting at start, or in the newest
// window if that starts later (after an interval change the old grid's last
// window may); the list stays in order.
func (ws Windows) Add(start, n int64) Windows {
	if k := len(ws); k > 0 && ws[k-1].Start >= start {
		ws[k-1].Permits += n
		return ws
	}
	return append(ws, Window{Start: start, Permits: n})
}

// Take removes up to n permits from the newest window that starts at or
// before t and ends after it (it is interval long), and returns how many it
// removed; an emptied window is dropped.
func (ws *Windows) Take(t, n, interval int64) int64 {
	l := *ws
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].Start > t {
			continue
		}
		if l[i].Start+interval <= t {
			return 0
		}
		if n > l[i].Permits {
			n = l[i].Permits
		}
		l[i].Permits -= n
		if l[i].Permits == 0 {
			l = append(l[:i], l[i+1:]...)
			if len(l) == 0 {
				l = nil
			}
		}
		*ws = l
		return n
	}
	return 0
}
