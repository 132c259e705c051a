package oci

import (
	"fmt"
	"io"
	"strings"
)

// What a pull or a read out of a layer may go over; a LimitError names one. Names of limits
// that count bytes end in "bytes".
const (
	// LimitPulledBytes counts the bytes pulled from a registry: the manifest and every layer.
	LimitPulledBytes = "pulled bytes"
	// LimitLayers counts the layers a manifest lists.
	LimitLayers = "layers"
	// LimitUncompressedBytes counts the bytes read out of layers as they are decompressed,
	// tar headers and padding included.
	LimitUncompressedBytes = "uncompressed bytes"
)

// LimitError is a pull, a read or a render that went over a limit. Nothing past the limit is
// read or held.
type LimitError struct {
	// Limit names what went over: one of the Limit constants of this package or of
	// internal/render.
	Limit string
	// Max is the limit.
	Max int64
	// Seen is how much there was; 0 when reading stopped past the limit, with more to come.
	Seen int64
}

// Error implements error: "more than the limit of 128Mi uncompressed bytes", or
// "150Mi pulled bytes, over the limit of 100Mi".
func (e *LimitError) Error() string {
	if e.Seen == 0 {
		return fmt.Sprintf("more than the limit of %s %s", e.format(e.Max), e.Limit)
	}
	return fmt.Sprintf("%s %s, over the limit of %s", e.format(e.Seen), e.Limit, e.format(e.Max))
}

// format writes n in the largest binary unit not above it when it is a whole number of them
// and the limit counts bytes (128Mi), else in digits: as the controller's flags take it.
func (e *LimitError) format(n int64) string {
	if strings.HasSuffix(e.Limit, "bytes") {
		for _, u := range []struct {
			suffix string
			size   int64
		}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
			if n >= u.size {
				if n%u.size == 0 {
					return fmt.Sprintf("%d%s", n/u.size, u.suffix)
				}
				break
			}
		}
	}
	return fmt.Sprint(n)
}

// countingReader reads r and counts the bytes read into n. With max > 0, it fails with a
// *LimitError as soon as more than max would be counted, having read at most one byte past.
type countingReader struct {
	r     io.Reader
	n     int64
	max   int64
	limit string
}

// Read implements io.Reader.
func (c *countingReader) Read(p []byte) (int, error) {
	if c.max > 0 && c.n > c.max {
		return 0, c.exceeded()
	}
	if c.max > 0 && int64(len(p)) > c.max-c.n+1 {
		// One byte past the limit is enough to know there is more.
		p = p[:c.max-c.n+1]
	}
	k, err := c.r.Read(p)
	c.n += int64(k)
	if c.max > 0 && c.n > c.max {
		return k - int(c.n-c.max), c.exceeded()
	}
	return k, err
}

func (c *countingReader) exceeded() error {
	return &LimitError{Limit: c.limit, Max: c.max}
}
