//go:build tools

// Package tools pins the cosign command the deployment-record tests verify records with.
package tools

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
