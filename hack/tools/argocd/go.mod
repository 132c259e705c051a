// Module argocd pins the Argo CD release Kokumi is tested against: the test harness installs
// the CRDs of this module version, and the local fleet builds its controllers from it.
module github.com/kokumi-dev/kokumi/hack/tools/argocd

go 1.26.0

require github.com/argoproj/argo-cd/v3 v3.6.1
