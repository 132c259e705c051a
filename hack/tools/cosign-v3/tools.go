//go:build tools

// Package tools pins the cosign v3 command the deployment-record tests verify records with.
package tools

import (
	_ "github.com/sigstore/cosign/v3/cmd/cosign"
)
