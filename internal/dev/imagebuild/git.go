package imagebuild

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// GitVersion is the version of the tree in dir as `git describe --tags --always --dirty` says
// it, or "dev" when git cannot tell.
func GitVersion(dir string) string {
	if v := git(dir, "describe", "--tags", "--always", "--dirty"); v != "" {
		return v
	}
	return "dev"
}

// GitCommit is the commit checked out in dir, or "" when git cannot tell.
func GitCommit(dir string) string {
	return git(dir, "rev-parse", "HEAD")
}

// SourceDateEpoch is the time the image says it was made and every file in it was modified:
// $SOURCE_DATE_EPOCH when set (seconds since 1970), else the time of the commit checked out in
// dir, else 1970-01-01 (0). It makes the image depend on the commit, not on when it was built.
func SourceDateEpoch(dir string) (time.Time, error) {
	if s, ok := os.LookupEnv("SOURCE_DATE_EPOCH"); ok && s != "" {
		secs, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || secs < 0 {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds since 1970", s)
		}
		return time.Unix(secs, 0).UTC(), nil
	}
	if s := git(dir, "log", "-1", "--format=%ct"); s != "" {
		if secs, err := strconv.ParseInt(s, 10, 64); err == nil && secs >= 0 {
			return time.Unix(secs, 0).UTC(), nil
		}
	}
	return time.Unix(0, 0).UTC(), nil
}

// git runs git in dir and returns its trimmed output, or "" when it fails.
func git(dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
