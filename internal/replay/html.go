package replay

import "io"

// WriteHTML writes the report as one self-contained HTML page.
func WriteHTML(w io.Writer, rep *Report) error { return nil }
