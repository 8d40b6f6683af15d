# clawfarm — run `make help` for the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

GO            ?= go
K8S_VERSION   ?= v1.37.2
CONTROLLER_GEN = $(GO) tool controller-gen
# The concurrent packages: their code or their tests run something beside
# the test's goroutine — a `go` statement, an HTTP server, a controller
# manager, rignode or the fake kubelet in the test's process. `make test`
# runs these under the race detector and every other package without it, so
# each package is tested once (hack/test-sets.sh check fails on a stale
# entry). test/bench and test/chaos are left out: their managers run as
# processes of their own, built without -race.
RACE_PKGS     ?= ./cmd/loop ./cmd/manager ./cmd/modelsim ./cmd/rignode ./cmd/rigsim \
	./controllers/agentrun ./controllers/devicerig ./controllers/toolpolicy \
	./internal/claw ./internal/dev/devcluster ./internal/engine ./internal/engine/snapshot \
	./internal/progress ./internal/provider/openai ./internal/rig ./internal/riggate ./internal/rignode ./internal/runinbox \
	./internal/sim/modelsim ./internal/sim/rigsim ./internal/testing/fakekubelet \
	./internal/toolpolicy ./internal/trace ./internal/trace/upload ./test/sharding
# A test result comes from go test's cache while nothing the test read —
# its code, the files it opened, the environment variables it looked up — has
# changed (GOTEST_FLAGS=-count=1 runs everything afresh). Packages whose
# results depend on something else go here and always run (-count=1):
# test/boundaries reads the tree through `git ls-files` and `go list`, whose
# reads the cache cannot see. The tests that build a command and run it (the
# chaos test, the scale benchmark, modelsim's loop test) read its sources
# through internal/testing/gobuild, envtest's binaries and helm's are named by
# environment variables, and the chart tests read the chart helm renders.
NOCACHE_PKGS  ?= ./test/boundaries
GOTEST_FLAGS  ?=
# -trimpath keeps the package's directory out of the build's cache key, so a
# fresh clone in another folder reuses the compiled tests.
GOTEST_BUILD  ?= -trimpath
TEST_SETS      = env RACE_PKGS="$(RACE_PKGS)" NOCACHE_PKGS="$(NOCACHE_PKGS)" hack/test-sets.sh
# What the tests run on, built by `make k8s helm s3gw jaeger node registry` (the
# chaos test's kubelet host runs the node's binaries and pulls from a
# registry it starts); CLAWFARM_TEST_STRICT=1 makes a suite whose tool is
# missing fail instead of skipping.
NODE_TOOLS     = CLAWFARM_NODE_BINS="$$(hack/build-node.sh --print)" RUNC="$$(hack/install-runc.sh --print)" \
	CLAWFARM_REGISTRY="$$(hack/build-registry.sh --print)"
TEST_TOOLS     = KUBEBUILDER_ASSETS="$$(hack/build-k8s.sh --print)" HELM="$$(hack/build-helm.sh --print)" \
	VERSITYGW="$$(hack/build-versitygw.sh --print)" CLAWFARM_JAEGER="$$(hack/build-jaeger.sh --print)" $(NODE_TOOLS) CLAWFARM_TEST_STRICT=1
# hack/stage.sh times a stage for `make ci`'s table (CI_STAGES) and runs it.
STAGE          = hack/stage.sh
# What a vulnerability in the standard library does to `make vulncheck`: the
# toolchain is the machine's (GOTOOLCHAIN=local), so it warns unless set to fail.
VULNCHECK_STDLIB ?= warn

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Generate CRDs and RBAC from the markers.
	$(CONTROLLER_GEN) crd rbac:roleName=clawfarm-manager paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	@mkdir -p charts/clawfarm/crds charts/clawfarm/files && cp config/crd/bases/*.yaml charts/clawfarm/crds/
	@for r in role loop_role followup_role; do sed -n '/^rules:/,$$p' config/rbac/$$r.yaml | tail -n +2 > charts/clawfarm/files/$$r-rules.yaml; done

GENERATED = api config charts/clawfarm/crds charts/clawfarm/files

# The generators rewrite every file they make: a file that comes out the same
# gets its old modification time back, since go test's cache keys on it (the
# tests that read the CRDs, the chart or api/ would otherwise all run again).
.PHONY: verify-generated
verify-generated: ## Fail when generated files differ from what is committed.
	@snap=$$(mktemp -d); trap 'rm -rf "$$snap"' EXIT; \
	git ls-files -z -- $(GENERATED) | xargs -0 cp -a --parents -t "$$snap"; \
	$(MAKE) --no-print-directory generate manifests; \
	git ls-files -z -- $(GENERATED) | while IFS= read -r -d '' f; do \
		if cmp -s "$$f" "$$snap/$$f"; then touch -r "$$snap/$$f" "$$f"; fi; done; \
	if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files are stale; run 'make generate manifests' and commit:"; \
		git status --porcelain -- $(GENERATED); git diff --stat -- api config; exit 1; fi

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: verify-fmt
verify-fmt: ## Fail when gofmt would change a file.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet.
	$(GO) vet ./...

.PHONY: staticcheck
staticcheck: ## staticcheck (pinned in go.mod) on the whole tree.
	$(GO) tool staticcheck ./...

.PHONY: vulncheck
vulncheck: ## govulncheck (pinned in go.mod) against a pinned offline database; Go's own findings warn (VULNCHECK_STDLIB=fail fails them).
	$(GO) run ./hack/vulncheck -db "$$(hack/build-vulndb.sh)" -stdlib $(VULNCHECK_STDLIB) ./...

.PHONY: build
build: ## Build every binary into bin/.
	$(GO) build -o bin/ ./cmd/...

.PHONY: install-plugin
install-plugin: ## Install the kubectl plugin kubectl-claw into $(GOBIN) (else GOPATH/bin), or PREFIX/bin with PREFIX=dir.
	@d="$(if $(PREFIX),$(abspath $(PREFIX))/bin,$$($(GO) env GOBIN))"; [ -n "$$d" ] || d="$$($(GO) env GOPATH)/bin"; \
		mkdir -p "$$d" && GOBIN="$$d" $(GO) install ./cmd/kubectl-claw && \
		install -m 0755 cmd/kubectl-claw/kubectl_complete-claw "$$d/" && \
		echo "installed $$d/kubectl-claw and kubectl_complete-claw: with $$d on PATH, run kubectl claw --help (docs/kubectl-claw.md)"

##@ Images

PLATFORMS ?= linux/amd64,linux/arm64
# Platforms of the kubectl-claw and rig-host archives of a release, and where it goes.
BINARIES ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64
DIST ?= dist

.PHONY: images
images: ## Build the OCI images into bin/images and rignode's release binaries into bin/release; REGISTRY=host:port pushes them.
	$(GO) run ./hack/images --platforms $(PLATFORMS) $(if $(REGISTRY),--push $(REGISTRY))

.PHONY: release
release: helm ## Build a release into $(DIST) (docs/release.md): images, chart, install.yaml, kustomize base, krew and rig-host archives, SBOMs, SHA256SUMS; VERSION=v0.3.0, REGISTRY=host:port pushes.
	HELM="$$(hack/build-helm.sh --print)" $(GO) run ./hack/release --platforms $(PLATFORMS) --binaries $(BINARIES) --out $(DIST) \
		$(if $(VERSION),--version $(VERSION)) $(if $(REGISTRY),--push $(REGISTRY))

.PHONY: registry
registry: ## Build (once) the pinned CNCF Distribution registry from source into the cache.
	hack/build-registry.sh >/dev/null

##@ Tests

.PHONY: k8s
k8s: ## Build (once) the pinned control plane from source into bin/k8s/$(K8S_VERSION).
	hack/build-k8s.sh >/dev/null

.PHONY: node
node: ## Build (once) what the dev cluster's kubelet node runs (containerd, its shim, CNI plugins, pause) and install Debian's runc.
	hack/build-node.sh >/dev/null
	hack/install-runc.sh >/dev/null

.PHONY: helm
helm: ## Build (once) the pinned helm CLI from source into the cache.
	hack/build-helm.sh >/dev/null

.PHONY: chart-check
chart-check: helm ## helm lint and helm template the chart; its schema must refuse a typo.
	$$(hack/build-helm.sh --print) lint --strict charts/clawfarm
	$$(hack/build-helm.sh --print) template clawfarm charts/clawfarm --namespace clawfarm-system >/dev/null
	$$(hack/build-helm.sh --print) template clawfarm charts/clawfarm --namespace clawfarm-system \
		--set runs.namespaces='{farm-a,farm-b}' --set metrics.enabled=false --set manager.replicas=1 >/dev/null
	$$(hack/build-helm.sh --print) template clawfarm charts/clawfarm --namespace clawfarm-system \
		--set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboard.enabled=true --set manager.replicas=3 \
		--set rignode.rbac.create=true --set 'rignode.rbac.subjects[0].kind=Group' --set 'rignode.rbac.subjects[0].name=system:nodes' \
		--set 'imagePullSecrets[0].name=regcred' \
		--set image.manager.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000 >/dev/null
	$$(hack/build-helm.sh --print) template clawfarm charts/clawfarm --namespace clawfarm-system \
		--set trial.enabled=true --set trial.nodeName=node-1 --set 'runs.namespaces={farm}' >/dev/null
	@if $$(hack/build-helm.sh --print) template clawfarm charts/clawfarm --set manager.replica=2 >/dev/null 2>&1; then \
		echo "chart-check: the chart rendered with manager.replica=2; values.schema.json must refuse unknown values"; exit 1; fi
	@echo "chart-check: values.schema.json refuses manager.replica=2, as it must"

.PHONY: s3gw
s3gw: ## Build (once) the pinned Versity S3 gateway from source into the cache (the trace server's S3 store is tested on it).
	hack/build-versitygw.sh >/dev/null

.PHONY: jaeger
jaeger: ## Build (once) the pinned Jaeger v2 from source into the cache (the loop's OpenTelemetry export is tested on it, docs/otel.md).
	hack/build-jaeger.sh >/dev/null

.PHONY: test
test: test-plain test-race ## Run every test, each package once: envtest on the real kube-apiserver and etcd, the chart through helm, the S3 store on a real S3 server, the concurrent packages under the race detector.

.PHONY: test-sets
test-sets: ## Fail when RACE_PKGS or NOCACHE_PKGS names a package that is not there; print the sets' sizes.
	@$(TEST_SETS) check

.PHONY: test-plain
test-plain: k8s helm s3gw jaeger node registry test-sets ## Run the packages outside RACE_PKGS (half of make test).
	@$(STAGE) test -- $(TEST_SETS) run plain cached -- env $(TEST_TOOLS) $(GO) test $(GOTEST_BUILD) $(GOTEST_FLAGS)
	@$(STAGE) test -- $(TEST_SETS) run plain nocache -- env $(TEST_TOOLS) $(GO) test $(GOTEST_BUILD) $(GOTEST_FLAGS) -count=1

.PHONY: test-race
test-race: k8s helm s3gw jaeger node registry test-sets ## Run the concurrent packages (RACE_PKGS) under the race detector (half of make test).
	@$(STAGE) race -- $(TEST_SETS) run race cached -- env $(TEST_TOOLS) $(GO) test -race $(GOTEST_BUILD) $(GOTEST_FLAGS)
	@$(STAGE) race -- $(TEST_SETS) run race nocache -- env $(TEST_TOOLS) $(GO) test -race $(GOTEST_BUILD) $(GOTEST_FLAGS) -count=1

.PHONY: unit
unit: ## Run every test that needs no API server, without the race detector: the envtest suites say they skip.
	@$(TEST_SETS) run all cached -- env -u KUBEBUILDER_ASSETS -u HELM -u VERSITYGW -u CLAWFARM_JAEGER -u CLAWFARM_TEST_STRICT $(GO) test $(GOTEST_BUILD) $(GOTEST_FLAGS)
	@$(TEST_SETS) run all nocache -- env -u KUBEBUILDER_ASSETS -u HELM -u VERSITYGW -u CLAWFARM_JAEGER -u CLAWFARM_TEST_STRICT $(GO) test $(GOTEST_BUILD) $(GOTEST_FLAGS) -count=1
	@echo "make unit: the envtest suites (a TestMain calling testenv.MainNeeds) and the tests needing helm or the S3 gateway skipped, saying so under go test -v; make test runs them"

.PHONY: bench-operator
bench-operator: k8s ## Operator benchmark: 200 rigs, 1,000 runs on envtest, then the same work as Indexed Jobs run by kube-controller-manager's Job controller.
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) $(GO) test -tags bench -v -run '^TestBenchOperator$$' -count=1 -timeout 30m ./test/bench/

.PHONY: bench-writes
bench-writes: k8s ## What one write of each kind a run or a Job makes costs an idle kube-apiserver (AgentRun and Job creates and status writes, rig status, Lease, Event).
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) $(GO) test -tags bench -v -run '^TestBenchWriteCosts$$' -count=1 -timeout 10m ./test/bench/

.PHONY: bench-dev
bench-dev: k8s ## Dev-cluster side by side: 20 rigs × 5 sessions as AgentRuns, then as Indexed Jobs of the same loop pods, on the real scheduler, Job controller and rignode.
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) $(GO) test -tags bench -v -run '^TestBenchDevCluster$$' -count=1 -timeout 30m ./test/devbench/

.PHONY: bench-scale
bench-scale: k8s ## Scale benchmark: 2,000 rigs on 20 nodes, 10,000 runs in one burst, the manager in its own process, then the same pods as Indexed Jobs side by side (a reduced run is part of make test).
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) BENCH_SCALE=full $(GO) test -v -run '^TestBenchScale$$' -count=1 -timeout 90m ./test/bench/

.PHONY: chaos
chaos: k8s node registry ## Chaos benchmark: 120 rigs (fake kubelet, rignode, kubelet), 500 runs, managers, kubelet and containerd SIGKILLed, nodes cut off; every safety figure must be 0.
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) $(NODE_TOOLS) CHAOS=full $(GO) test -v -run '^TestChaos$$' -count=1 -timeout 60m ./test/chaos/

.PHONY: bench-engine bench-gateway bench-crd
bench-engine: ## Engine benchmark: a 300-turn scripted session, the OpenAI wires (chat, Responses stateless and chained) side by side, and the prompt cache per wire and fold cadence.
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./internal/engine/...

.PHONY: check-physiclaw
check-physiclaw: k8s ## Check the rig client, the DeviceRig probe and the gateway against a real PhysiClaw control plane at PHYSICLAW_URL (docs/rig-contract.md).
	@test -n "$(PHYSICLAW_URL)" || { echo "set PHYSICLAW_URL to a PhysiClaw control plane, e.g. http://127.0.0.1:18848 (docs/rig-contract.md, \"Checked against the real server\")"; exit 2; }
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) PHYSICLAW_URL=$(PHYSICLAW_URL) $(GO) test -tags physiclaw -count=1 -v -run PhysiClaw ./internal/rig/ ./controllers/devicerig/ ./internal/riggate/

bench-gateway: k8s ## Rig gateway benchmark: what it adds to a rig call (median and p99, through it and straight to the rig).
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) $(GO) test -run '^$$' -bench BenchmarkGatewayCall -benchtime 3000x -count 5 ./internal/riggate/

bench-crd: ## What the AgentRun CRD's validation rules cost the API server on each update of a started run (no cluster: the API server's own CEL validator).
	$(GO) test -run '^$$' -bench '^BenchmarkAgentRunUpdateRules$$' -count 5 ./test/bench/

.PHONY: ci
ci: ## What .ci/run runs: gofmt, vet, staticcheck, vulncheck, the generated code, the chart, make test, make e2e; then each stage's time.
	MAKE="$(MAKE)" hack/ci-stages.sh

##@ Dev cluster

DEV_DIR  ?= $(CURDIR)/.dev
DEV_RIGS ?= 5
# Rigs on the dev cluster's kubelet node (real kubelet, containerd, runc);
# the others are on rignode.
DEV_KUBELET_RIGS ?= 0,4
# The manager and the trace server as containers on a kubelet node of their own.
DEV_KUBELET_SYSTEM ?= true
# With the flags of the binaries it builds (dev-bins), so that one compile of
# client-go and controller-runtime serves both.
DEVCLUSTER = CGO_ENABLED=0 $(GO) run -trimpath ./cmd/devcluster

.PHONY: dev-up
dev-up: dev-tools ## Start the local dev cluster (control plane, a kubelet node, rignode, rigsim, modelsim, the operator) in .dev/.
	$(DEVCLUSTER) up --dir $(DEV_DIR) --rigs $(DEV_RIGS) --kubelet-rigs $(DEV_KUBELET_RIGS) --kubelet-system=$(DEV_KUBELET_SYSTEM)

.PHONY: dev-down
dev-down: ## Stop the local dev cluster.
	$(DEVCLUSTER) down --dir $(DEV_DIR)

.PHONY: dev-status
dev-status: ## Show the dev cluster's processes.
	$(DEVCLUSTER) status --dir $(DEV_DIR)

# What the dev cluster runs, built side by side the first time: on 2 cores
# one build's single-threaded link, module download or lone slow package
# leaves a core that another build takes. Each is a no-op once built.
.PHONY: dev-tools
dev-tools: ## Build (once) the control plane, the kubelet node, helm, the registry and the project's binaries, side by side.
	@$(MAKE) --no-print-directory -j5 k8s node helm registry dev-bins

# The binaries `devcluster up` builds, with its flags (the images' flags), so
# that its own go build finds them built.
.PHONY: dev-bins
dev-bins:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/loop ./cmd/manager ./cmd/rigsim ./cmd/modelsim ./cmd/rignode ./cmd/kubectl-claw

.PHONY: demo
demo: dev-tools ## The main job: dev cluster up, one sample AgentRun per sentinel, watched to the end.
	$(DEVCLUSTER) demo --dir $(DEV_DIR) --rigs $(DEV_RIGS) --kubelet-rigs $(DEV_KUBELET_RIGS) --kubelet-system=$(DEV_KUBELET_SYSTEM)

# The e2e tests mostly wait on their rigs' simulated latencies, each on a rig
# of its own (test/e2e's rigCount): eight at once, not GOMAXPROCS (two) at a
# time. All sixteen at once loaded the two cores enough that TestCancel's
# cancel once came after the session's Start tap; eight take about as long,
# since the suite is as long as its slowest tests.
E2E_PARALLEL ?= 8

.PHONY: e2e
e2e: k8s node helm ## End-to-end suite on fresh dev clusters of its own (real scheduler, CronJob controller, a kubelet node with containerd, the UI in headless Chromium), then docs/install.md as written (test/install).
	hack/install-chromium.sh >/dev/null
	KUBEBUILDER_ASSETS=$$(hack/build-k8s.sh --print) HELM="$$(hack/build-helm.sh --print)" CLAWFARM_TEST_STRICT=1 \
		$(GO) test -tags e2e -count=1 -v -p 1 -parallel $(E2E_PARALLEL) -timeout 30m ./test/e2e/ ./test/install/
