// Package fleet decides, without a client, what a Serving deploys where: one Argo CD
// Application per selected cluster, which clusters are held and why, and how the states Argo
// CD reports fold into the Serving's counts, its capped list of targets and its Ready condition.
package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLength is the longest name the API server accepts for an Application.
const MaxNameLength = 253

// ApplicationName returns the stable, unique name of the Application that deploys the Serving
// namespace/name to cluster: "<namespace>.<name>.<cluster>". A namespace holds no dot, so the
// first dot ends it; when the Serving's name holds a dot too, or the name would pass 253
// characters, a hash of all three keeps it unique and the readable part is shortened.
func ApplicationName(namespace, name, cluster string) string {
	full := namespace + "." + name + "." + cluster
	if !strings.Contains(name, ".") && len(full) <= MaxNameLength {
		return full
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name + "/" + cluster))
	suffix := "-" + hex.EncodeToString(sum[:])[:12]
	if len(full) > MaxNameLength-len(suffix) {
		full = strings.TrimRight(full[:MaxNameLength-len(suffix)], ".-")
	}
	return full + suffix
}
