# Kokumi. `make demo` runs a local fleet; `make test` runs the tests against real control planes.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

ROOT := $(abspath .)
BIN  := $(ROOT)/bin

# Every version is pinned once: the Kubernetes, etcd and Argo CD versions in the go.mod of their
# tools module (hack/tools/*), the Go tools below.
KUBE_VERSION   := $(shell grep -oE 'k8s.io/kubernetes v[0-9][^ ]*' hack/tools/kube/go.mod | head -1 | cut -d' ' -f2)
ETCD_VERSION   := $(shell grep -oE 'go.etcd.io/etcd/server/v3 v[0-9][^ ]*' hack/tools/etcd/go.mod | head -1 | cut -d' ' -f2)
ARGOCD_VERSION := $(shell grep -oE 'github.com/argoproj/argo-cd/v3 v[0-9][^ ]*' hack/tools/argocd/go.mod | head -1 | cut -d' ' -f2)
KWOK_VERSION   := $(shell grep -oE 'sigs.k8s.io/kwok v[0-9][^ ]*' hack/tools/kwok/go.mod | head -1 | cut -d' ' -f2)
# Stock cosign, which the deployment-record tests verify records with.
COSIGN_VERSION := $(shell grep -oE 'github.com/sigstore/cosign/v2 v[0-9][^ ]*' hack/tools/cosign/go.mod | head -1 | cut -d' ' -f2)
COSIGN_V3_VERSION := $(shell grep -oE 'github.com/sigstore/cosign/v3 v[0-9][^ ]*' hack/tools/cosign-v3/go.mod | head -1 | cut -d' ' -f2)
CONTROLLER_TOOLS_VERSION := v0.23.0
GOLANGCI_LINT_VERSION    := v2.15.0
# Argo CD needs a newer Go than the project; only what touches its module uses it (fetched through the proxy).
ARGOCD_GO_TOOLCHAIN      := go1.27.3

KUBE_DIR   := $(BIN)/k8s-$(KUBE_VERSION)
ETCD_DIR   := $(BIN)/etcd-$(ETCD_VERSION)
ARGOCD_CRD_DIR := $(BIN)/argocd-crds-$(ARGOCD_VERSION)
ARGOCD_DIR := $(BIN)/argocd-$(ARGOCD_VERSION)
KWOK_DIR   := $(BIN)/kwok-$(KWOK_VERSION)
COSIGN_DIR := $(BIN)/cosign-$(COSIGN_VERSION)
COSIGN_V3_DIR := $(BIN)/cosign-$(COSIGN_V3_VERSION)
# FLEET_DIR is where `kokumi dev` and the e2e tests find kube-scheduler, KWOK and Argo CD.
FLEET_DIR  := $(BIN)/fleet
# ENVTEST_DIR is where the test harness finds kube-apiserver, etcd, kubectl, kube-controller-manager
# (which every cluster of the local fleet runs too) and Argo CD's CRDs.
ENVTEST_DIR := $(BIN)/envtest

CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
GOLANGCI_LINT  := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

CHART_DIR := $(ROOT)/charts/kokumi

# VERSION is the build's version: a tagged commit's tag, else 0.0.0-<commit> (SemVer, as Helm
# requires of a chart). The image, the chart and `kokumi version` carry it.
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || echo 0.0.0-$$(git rev-parse --short=12 HEAD 2>/dev/null || echo dev))
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_LDFLAGS := -X github.com/kokumi-dev/kokumi/internal/version.Version=$(VERSION) -X github.com/kokumi-dev/kokumi/internal/version.Commit=$(COMMIT)
# CHART_REPO, when set, is the OCI repository `make chart` pushes to, such as oci://registry.example.com/charts.
CHART_REPO ?=

GO_BUILD_TOOL := go build -buildvcs=false -trimpath -ldflags "-s -w"
# KUBE_LDFLAGS stamps the Kubernetes binaries with their version, as Kubernetes' own build does
# (hack/lib/version.sh): without it their /version says v0.0.0-master and a placeholder.
KUBE_LDFLAGS := $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(pkg).gitVersion=$(KUBE_VERSION) -X $(pkg).gitMajor=$(word 1,$(subst ., ,$(KUBE_VERSION:v%=%))) -X $(pkg).gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) -X $(pkg).gitTreeState=clean)
GO_BUILD_KUBE := go build -buildvcs=false -trimpath -ldflags "-s -w $(KUBE_LDFLAGS)"

.PHONY: all
all: build

##@ Build

.PHONY: build
build: kubectl-kokumi ## Build bin/kokumi and the kubectl plugin bin/kubectl-kokumi.
	go build -buildvcs=false -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/kokumi ./cmd/kokumi

.PHONY: kubectl-kokumi
kubectl-kokumi: ## Build bin/kubectl-kokumi, the kubectl plugin (docs/cli.md).
	go build -buildvcs=false -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN)/kubectl-kokumi ./cmd/kubectl-kokumi

.PHONY: demo
demo: build test-assets fleet-assets ## Run a local fleet: a hub, three member clusters, Argo CD and Kokumi (see docs/quickstart.md).
	$(BIN)/kokumi dev

##@ Release

# IMAGE, when set, is where `make image` pushes, such as registry.example.com/kokumi; without a
# tag it is tagged VERSION, the tag the chart's appVersion names.
IMAGE ?=
IMAGE_REF = $(IMAGE)$(if $(findstring :,$(lastword $(subst /, ,$(IMAGE)))),,:$(VERSION))
PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: image
image: ## Build the container image without Docker (docs/image.md): an OCI layout in bin/image/kokumi, or pushed with IMAGE=registry/repo[:tag] (IMAGE_FLAGS=--insecure for a plain-HTTP registry).
	go run ./hack/image --platforms $(PLATFORMS) --version $(VERSION) --commit $(COMMIT) $(if $(IMAGE),--push $(IMAGE_REF),--output $(BIN)/image/kokumi) $(IMAGE_FLAGS)

.PHONY: chart
chart: ## Package the Helm chart into bin/chart/ (VERSION); with CHART_REPO=oci://…, push it there too.
	go run ./hack/chart --chart $(CHART_DIR) --version $(VERSION) --app-version $(VERSION) --output $(BIN)/chart $(if $(CHART_REPO),--push $(CHART_REPO))

.PHONY: chart-dry-run
chart-dry-run: ## Install the chart with server-side dry run on the cluster of $$KUBECONFIG (such as make demo's hub) and report refusals and Pod Security warnings.
	go run ./hack/chart --chart $(CHART_DIR) --version $(VERSION) --app-version $(VERSION) --output $(BIN)/chart --dry-run-install --namespace $(or $(CHART_NAMESPACE),kokumi-system) $(if $(CHART_VALUES),--values $(CHART_VALUES))

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC (the controller's role and the server's).
	$(CONTROLLER_GEN) crd rbac:roleName=kokumi-controller paths=./api/... paths=./internal/controller/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=kokumi-server paths=./internal/server/... output:rbac:artifacts:config=config/server
	# The Helm chart installs the same CRDs and RBAC (charts/kokumi/templates read files/).
	rm -rf $(CHART_DIR)/files && mkdir -p $(CHART_DIR)/files/crds $(CHART_DIR)/files/rbac $(CHART_DIR)/files/server
	cp config/crd/bases/*.yaml $(CHART_DIR)/files/crds/
	cp $(filter-out config/rbac/kustomization.yaml,$(wildcard config/rbac/*.yaml)) $(CHART_DIR)/files/rbac/
	cp config/server/role.yaml $(CHART_DIR)/files/server/

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: layers
layers: $(GOLANGCI_LINT) ## Check the layering (.golangci.yml's depguard rules), test files included.
	$(GOLANGCI_LINT) run --enable-only depguard ./...

.PHONY: verify
verify: generate manifests typecheck-ui layers ## Regenerate and fail when the tree changes; gofmt, go vet and the layering.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: run make fmt"; exit 1; }
	go vet ./...
	@if [ -n "$$(git status --porcelain -- api config charts)" ]; then git status --porcelain -- api config charts; git diff -- api config charts | head -50; \
		echo "generated files are stale: run make generate manifests and commit"; exit 1; fi

##@ Tests

.PHONY: browser-deps
browser-deps: ## Install what the UI's type check and browser tests need: playwright-core and typescript (npm), Debian's chromium.
	npm ci --prefix test/browser --no-audit --no-fund
	@test -x /usr/bin/chromium || { echo "install Chromium: apt-get install -y chromium" >&2; exit 1; }

.PHONY: typecheck-ui
typecheck-ui: browser-deps ## Type-check the UI (internal/server/ui/app.js) with tsc.
	npm run --prefix test/browser typecheck

.PHONY: test
test: test-assets browser-deps ## Build the control-plane binaries (cached in bin/) and run every test, then the Serving's again under API faults.
	go test ./... -count=1 -timeout 30m
	# Every Serving scenario again, with a tenth of the controller's API requests failing.
	KOKUMI_TEST_API_FAULTS=0.1 go test ./test/serving -count=1 -timeout 30m

.PHONY: bench
bench: build test-assets fleet-assets ## Measure Kokumi's fan-out to 100, 1,000 and 10,000 fake clusters against a bare client and Argo CD's ApplicationSet controller, a two-wave roll-out (canary, then the rest 10% at a time) to 1,000 against all at once, and the fleet view's API over 10,000 clusters (docs/performance.md); the tables go to bin/bench.md.
	go run ./hack/bench -n 100,1000,10000 --rollout 1000 --fleet 10000 --kokumi $(BIN)/kokumi --out $(BIN)/bench.md

.PHONY: bench-memory
bench-memory: build test-assets ## Measure the controller's start and memory over 100 Servings × 1,000 clusters: 100,000 Applications of 20 KB put into etcd (docs/performance.md); the row goes to bin/bench-memory.md.
	go run ./hack/bench --memory --memory-servings 100 --memory-clusters 1000 --timeout 20m --kokumi $(BIN)/kokumi --out $(BIN)/bench-memory.md

.PHONY: bench-stall
bench-stall: build test-assets ## Measure a tenant's promotion to 100 clusters with no other Serving, then while 8 other tenants' HTTP gates hang for 60 s (docs/performance.md); fails past 1.2 times; the table goes to bin/bench-stall.md.
	go run ./hack/bench --stall 100 --stall-gated 8 --stall-hang 60s --stall-max-ratio 1.2 --controller-arg=--verify-allowed-cidrs=127.0.0.1/32 --kokumi $(BIN)/kokumi --out $(BIN)/bench-stall.md

.PHONY: bench-render
bench-render: build test-assets ## Measure Kokumi's renders when 100 and 1,000 Orders over 100 namespaces move to a new chart version, against a bare pipeline doing the same work (docs/performance.md); the table goes to bin/bench-render.md.
	go run ./hack/benchrender -n 100,1000 --kokumi $(BIN)/kokumi --out $(BIN)/bench-render.md

.PHONY: bench-verify
bench-verify: test-assets ## Measure what Product.spec.verify adds to a render of a chart and two images (the first verification; p50/p95 of an unchanged, verified input's check) and what signing and attaching the provenance adds to a new render (docs/verified-sources.md).
	go test ./internal/sourcesig ./internal/provenance -run '^$$' -bench 'BenchmarkVerifyARender|BenchmarkAttach' -benchtime 200x

FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME past its seed corpus (testdata/fuzz).
	hack/fuzz.sh ./internal/images FuzzPinnedRef $(FUZZTIME)
	hack/fuzz.sh ./internal/images FuzzVendorRepository $(FUZZTIME)
	hack/fuzz.sh ./internal/images FuzzFindAndRewrite $(FUZZTIME)
	hack/fuzz.sh ./internal/render FuzzHelmValues $(FUZZTIME)

# The stamp ends in the directory's layout version: bump it when the directory gains a file.
ENVTEST_STAMP := $(ENVTEST_DIR)/.stamp-$(KUBE_VERSION)-$(ETCD_VERSION)-$(ARGOCD_VERSION)-$(COSIGN_VERSION)-$(COSIGN_V3_VERSION)-3

.PHONY: test-assets
test-assets: $(ENVTEST_STAMP) ## Build kube-apiserver, kubectl, kube-controller-manager, etcd, cosign v2 and v3; fetch Argo CD's CRDs.

$(ENVTEST_STAMP): $(KUBE_DIR)/kube-apiserver $(KUBE_DIR)/kubectl $(KUBE_DIR)/kube-controller-manager $(ETCD_DIR)/etcd $(ARGOCD_CRD_DIR)/application-crd.yaml $(COSIGN_DIR)/cosign $(COSIGN_V3_DIR)/cosign
	rm -rf $(ENVTEST_DIR) && mkdir -p $(ENVTEST_DIR)/crds
	ln -s ../k8s-$(KUBE_VERSION)/kube-apiserver $(ENVTEST_DIR)/kube-apiserver
	ln -s ../k8s-$(KUBE_VERSION)/kubectl $(ENVTEST_DIR)/kubectl
	ln -s ../k8s-$(KUBE_VERSION)/kube-controller-manager $(ENVTEST_DIR)/kube-controller-manager
	ln -s ../etcd-$(ETCD_VERSION)/etcd $(ENVTEST_DIR)/etcd
	ln -s ../cosign-$(COSIGN_VERSION)/cosign $(ENVTEST_DIR)/cosign
	ln -s ../cosign-$(COSIGN_V3_VERSION)/cosign $(ENVTEST_DIR)/cosign-v3
	cp $(ARGOCD_CRD_DIR)/application-crd.yaml $(ARGOCD_CRD_DIR)/appproject-crd.yaml $(ENVTEST_DIR)/crds/
	printf 'kubernetes=%s\netcd=%s\nargocd=%s\ncosign=%s\ncosign-v3=%s\n' $(KUBE_VERSION) $(ETCD_VERSION) $(ARGOCD_VERSION) $(COSIGN_VERSION) $(COSIGN_V3_VERSION) > $(ENVTEST_DIR)/versions
	touch $@

.PHONY: e2e
e2e: build test-assets fleet-assets ## Run the end-to-end tests on a local fleet with real Argo CD.
	go test -tags e2e ./test/e2e -count=1 -v -timeout 30m

.PHONY: fleet-assets
fleet-assets: $(FLEET_DIR)/.stamp-$(KUBE_VERSION)-$(ARGOCD_VERSION)-$(KWOK_VERSION) ## Build kube-scheduler, KWOK and Argo CD for the local fleet; check redis-server.

$(FLEET_DIR)/.stamp-$(KUBE_VERSION)-$(ARGOCD_VERSION)-$(KWOK_VERSION): $(KUBE_DIR)/kube-scheduler $(KWOK_DIR)/kwok $(ARGOCD_DIR)/argocd
	@command -v redis-server >/dev/null || { echo "redis-server is missing: apt-get install -y redis-server"; exit 1; }
	rm -rf $(FLEET_DIR) && mkdir -p $(FLEET_DIR)
	ln -s ../k8s-$(KUBE_VERSION)/kube-scheduler $(FLEET_DIR)/kube-scheduler
	ln -s ../kwok-$(KWOK_VERSION)/kwok $(FLEET_DIR)/kwok
	ln -s ../kwok-$(KWOK_VERSION)/stages.yaml $(FLEET_DIR)/kwok-stages.yaml
	ln -s ../argocd-$(ARGOCD_VERSION)/argocd $(FLEET_DIR)/argocd
	printf 'kubernetes=%s\nargocd=%s\nkwok=%s\n' $(KUBE_VERSION) $(ARGOCD_VERSION) $(KWOK_VERSION) > $(FLEET_DIR)/versions
	touch $@

.PHONY: argocd
argocd: $(ARGOCD_DIR)/argocd ## Build Argo CD's controllers (about 5 minutes the first time).

$(KUBE_DIR)/kube-apiserver $(KUBE_DIR)/kubectl &:
	@echo "building kube-apiserver and kubectl $(KUBE_VERSION) (about 5 minutes the first time)"
	mkdir -p $(KUBE_DIR)
	cd hack/tools/kube && $(GO_BUILD_KUBE) -o $(KUBE_DIR)/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl

# The local fleet's clusters run kube-controller-manager (the hub some of its controllers, the tests
# that need them too) and kube-scheduler, which places Pods on the node KWOK plays.
$(KUBE_DIR)/kube-controller-manager $(KUBE_DIR)/kube-scheduler &:
	@echo "building kube-controller-manager and kube-scheduler $(KUBE_VERSION) (a few minutes the first time)"
	mkdir -p $(KUBE_DIR)
	cd hack/tools/kube && $(GO_BUILD_KUBE) -o $(KUBE_DIR)/ k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler

# Argo CD's multicall binary: it runs as argocd-application-controller or argocd-repo-server by $ARGOCD_BINARY_NAME.
$(ARGOCD_DIR)/argocd:
	@echo "building Argo CD $(ARGOCD_VERSION) (about 5 minutes the first time)"
	mkdir -p $(ARGOCD_DIR)
	cd hack/tools/argocd && GOTOOLCHAIN=$(ARGOCD_GO_TOOLCHAIN) $(GO_BUILD_TOOL) -o $@.tmp github.com/argoproj/argo-cd/v3/cmd
	mv $@.tmp $@

# KWOK, and the stages it plays (those kwokctl uses by default: nodes turn Ready and keep a lease,
# Pods turn Ready, complete and go away), taken from the same module version. The fleet plays a
# stage of its own beside them (internal/dev/sandbox/kwok-job-stages.yaml: a Job of the image
# kwok.local/fail fails), which it writes into its state directory at each start.
$(KWOK_DIR)/kwok:
	mkdir -p $(KWOK_DIR)
	cd hack/tools/kwok && $(GO_BUILD_TOOL) -o $@.tmp sigs.k8s.io/kwok/cmd/kwok
	dir=$$(cd hack/tools/kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok); test -n "$$dir"; \
		for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do \
			echo '---'; cat $$dir/kustomize/stage/$$f.yaml; done > $(KWOK_DIR)/stages.yaml
	mv $@.tmp $@

$(ETCD_DIR)/etcd:
	mkdir -p $(ETCD_DIR)
	cd hack/tools/etcd && $(GO_BUILD_TOOL) -o $(ETCD_DIR)/etcd go.etcd.io/etcd/server/v3

# Stock cosign, for the deployment-record tests (`cosign verify-attestation`).
.PHONY: cosign
cosign: $(COSIGN_DIR)/cosign ## Build cosign (about 2 minutes the first time).

$(COSIGN_DIR)/cosign:
	@echo "building cosign $(COSIGN_VERSION) (about 2 minutes the first time)"
	mkdir -p $(COSIGN_DIR)
	cd hack/tools/cosign && $(GO_BUILD_TOOL) -o $@.tmp github.com/sigstore/cosign/v2/cmd/cosign
	mv $@.tmp $@

# Stock cosign v3, which the same tests verify records with as well.
.PHONY: cosign-v3
cosign-v3: $(COSIGN_V3_DIR)/cosign ## Build cosign v3 (5 to 10 minutes on two cores the first time).

$(COSIGN_V3_DIR)/cosign:
	@echo "building cosign $(COSIGN_V3_VERSION) (5 to 10 minutes on two cores the first time)"
	mkdir -p $(COSIGN_V3_DIR)
	cd hack/tools/cosign-v3 && $(GO_BUILD_TOOL) -o $@.tmp github.com/sigstore/cosign/v3/cmd/cosign
	mv $@.tmp $@

$(ARGOCD_CRD_DIR)/application-crd.yaml:
	mkdir -p $(ARGOCD_CRD_DIR)
	dir=$$(GOTOOLCHAIN=$(ARGOCD_GO_TOOLCHAIN) go mod download -json github.com/argoproj/argo-cd/v3@$(ARGOCD_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
		test -n "$$dir" || { echo "go mod download of argo-cd $(ARGOCD_VERSION) gave no directory"; exit 1; }; \
		cp $$dir/manifests/crds/application-crd.yaml $$dir/manifests/crds/appproject-crd.yaml $(ARGOCD_CRD_DIR)/

$(CONTROLLER_GEN):
	GOBIN=$(dir $@) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: versions
versions: ## Print the pinned versions.
	@echo "kubernetes $(KUBE_VERSION) etcd $(ETCD_VERSION) argo-cd $(ARGOCD_VERSION) kwok $(KWOK_VERSION) cosign $(COSIGN_VERSION) cosign-v3 $(COSIGN_V3_VERSION)"

.PHONY: clean
clean: ## Remove bin/ (the cached control-plane builds too).
	rm -rf $(BIN)
