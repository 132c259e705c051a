//go:build tools

// Package tools pins Argo CD's multicall command (argocd-application-controller,
// argocd-repo-server, ... chosen by the name it is run under), which the local fleet runs.
package tools

import (
	_ "github.com/argoproj/argo-cd/v3/cmd"
)
