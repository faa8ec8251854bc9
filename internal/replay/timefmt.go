package replay

// Timestamps are parsed by hand, without allocating: nginx's and Apache's
// $time_local ("10/Oct/2023:13:55:36 +0000") and RFC 3339 with an
// optional fraction (Envoy's "2023-10-10T13:55:36.310Z", nginx's
// $time_iso8601). Years outside 1970–2200 are refused: times are kept in
// nanoseconds since the epoch, which int64 holds until 2262.

const nsPerSec = 1_000_000_000

// maxYear is the last year a timestamp may have; maxEpoch is its end, in
// seconds since the epoch.
const (
	maxYear  = 2200
	maxEpoch = 7289654399 // 2200-12-31T23:59:59Z
)

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (H. Hinnant's algorithm).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

var daysIn = [13]int64{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

func validDate(y, m, d int64) bool {
	if y < 1970 || y > maxYear || m < 1 || m > 12 || d < 1 || d > daysIn[m] {
		return false
	}
	return m != 2 || d < 29 || y%4 == 0 && (y%100 != 0 || y%400 == 0)
}

func digits(b []byte) (int64, bool) {
	var n int64
	if len(b) == 0 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// clockTime returns the seconds of "HH:MM:SS".
func clockTime(b []byte) (int64, bool) {
	if len(b) != 8 || b[2] != ':' || b[5] != ':' {
		return 0, false
	}
	h, ok1 := digits(b[0:2])
	m, ok2 := digits(b[3:5])
	s, ok3 := digits(b[6:8])
	if !ok1 || !ok2 || !ok3 || h > 23 || m > 59 || s > 60 {
		return 0, false
	}
	return h*3600 + m*60 + s, true
}

// zoneOffset returns the seconds east of UTC of "+hhmm", "-hh:mm" or "Z".
func zoneOffset(b []byte) (int64, bool) {
	if len(b) == 1 && (b[0] == 'Z' || b[0] == 'z') {
		return 0, true
	}
	if len(b) != 5 && len(b) != 6 || b[0] != '+' && b[0] != '-' {
		return 0, false
	}
	mm := b[3:]
	if len(b) == 6 {
		if b[3] != ':' {
			return 0, false
		}
		mm = b[4:]
	}
	h, ok1 := digits(b[1:3])
	m, ok2 := digits(mm)
	if !ok1 || !ok2 || h > 23 || m > 59 {
		return 0, false
	}
	off := h*3600 + m*60
	if b[0] == '-' {
		off = -off
	}
	return off, true
}

var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// parseLocalTime parses $time_local, "10/Oct/2023:13:55:36 +0000", into
// nanoseconds since the Unix epoch.
func parseLocalTime(b []byte) (int64, bool) {
	if len(b) != 26 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[20] != ' ' {
		return 0, false
	}
	d, ok := digits(b[0:2])
	if !ok {
		return 0, false
	}
	var m int64
	for i, name := range months {
		if b[3] == name[0] && b[4] == name[1] && b[5] == name[2] {
			m = int64(i) + 1
			break
		}
	}
	y, ok := digits(b[7:11])
	if !ok || !validDate(y, m, d) {
		return 0, false
	}
	secs, ok := clockTime(b[12:20])
	if !ok {
		return 0, false
	}
	off, ok := zoneOffset(b[21:26])
	if !ok {
		return 0, false
	}
	return (daysFromCivil(y, m, d)*86400 + secs - off) * nsPerSec, true
}

// parseRFC3339 parses "2023-10-10T13:55:36Z", with an optional fraction
// of a second (up to nanoseconds) and a zone of "Z" or "±hh:mm" (or
// "±hhmm"), into nanoseconds since the Unix epoch. A space may stand for
// the "T".
func parseRFC3339(b []byte) (int64, bool) {
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || b[10] != 'T' && b[10] != 't' && b[10] != ' ' {
		return 0, false
	}
	y, ok1 := digits(b[0:4])
	m, ok2 := digits(b[5:7])
	d, ok3 := digits(b[8:10])
	if !ok1 || !ok2 || !ok3 || !validDate(y, m, d) {
		return 0, false
	}
	secs, ok := clockTime(b[11:19])
	if !ok {
		return 0, false
	}
	rest := b[19:]
	var frac int64
	if rest[0] == '.' || rest[0] == ',' {
		i := 1
		scale := int64(nsPerSec)
		for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
			if scale > 1 {
				scale /= 10
				frac += int64(rest[i]-'0') * scale
			}
			i++
		}
		if i == 1 {
			return 0, false
		}
		rest = rest[i:]
	}
	off, ok := zoneOffset(rest)
	if !ok {
		return 0, false
	}
	return (daysFromCivil(y, m, d)*86400+secs-off)*nsPerSec + frac, true
}

// parseEpoch parses seconds since the Unix epoch with an optional
// fraction, as nginx's $msec writes them ("1696946136.123").
func parseEpoch(b []byte) (int64, bool) {
	i := 0
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	secs, ok := digits(b[:i])
	// 1970 to 2200, as the other forms.
	if !ok || i > 12 || secs > maxEpoch {
		return 0, false
	}
	var frac int64
	if i < len(b) {
		if b[i] != '.' || i+1 == len(b) {
			return 0, false
		}
		scale := int64(nsPerSec)
		for _, c := range b[i+1:] {
			if c < '0' || c > '9' {
				return 0, false
			}
			if scale > 1 {
				scale /= 10
				frac += int64(c-'0') * scale
			}
		}
	}
	return secs*nsPerSec + frac, true
}

// parseAnyTime parses any of the forms above.
func parseAnyTime(b []byte) (int64, bool) {
	if t, ok := parseRFC3339(b); ok {
		return t, true
	}
	if t, ok := parseLocalTime(b); ok {
		return t, true
	}
	return parseEpoch(b)
}
