package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/rollout"
)

// personIn adds a user bound to role in ns and returns a kubeconfig file of theirs.
func personIn(t *testing.T, ns, name, role string) string {
	t.Helper()
	cfg, err := env.AddUser(name)
	must(t, err)
	must(t, env.Client.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}))
	kubeconfig := filepath.Join(t.TempDir(), name+".kubeconfig")
	must(t, writeKubeconfig(kubeconfig, cfg, ns))
	return kubeconfig
}

func TestPauseResumeAndAbortWriteSpecRolloutAsThePerson(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "held")
	// The shipped admission policy holds spec.rollout.by to the writer: the plugin's writes pass it.
	if out, err := env.Kubectl(ctx, "apply", "-f", filepath.Join(env.Assets.Root, "config", "rbac", "serving_rollout_policy.yaml")); err != nil {
		t.Fatalf("apply the admission policy kokumi-serving-rollout: %v: %s", err, out)
	}
	order(t, ns, "web", "prod", v1.PromotionManual)
	preparation(t, ns, "web-1", prepSpec{order: "web", ready: metav1.ConditionTrue})
	preparation(t, ns, "web-2", prepSpec{order: "web", ready: metav1.ConditionTrue, digest: digest("2")})
	serving(t, ns, "web", "web-2")
	serving(t, ns, "empty", "")
	alice := personIn(t, ns, "alice", "edit")

	r := kubectlKokumi(t, "pause", "web", "--kubeconfig", alice)
	if r.code != 0 || r.stdout != "Paused the roll-out of Preparation web-2 of Serving held/web: no further cluster is changed until `kubectl kokumi resume web -n held`\n" {
		t.Errorf("pause: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if c := servingOf(t, ns, "web").Spec.Rollout; c == nil || !c.Paused || c.Abort != "" || c.By != "alice" {
		t.Fatalf("spec.rollout after alice paused: %+v, want paused by alice", c)
	}
	r = kubectlKokumi(t, "pause", "web", "--kubeconfig", alice)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "The roll-out of Preparation web-2 of Serving held/web was already paused by alice: nothing changed") {
		t.Errorf("pause again: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	// status shows what the controller then says, and who paused it.
	sv := servingOf(t, ns, "web")
	sv.Status.Rollout = &v1.RolloutStatus{Preparation: "web-2", From: "web-1", State: v1.RolloutPaused, By: "alice", Wave: rollout.AllAtOnceWave}
	must(t, env.Client.Status().Update(ctx, sv))
	if r := kubectlKokumi(t, "status", "web", "--kubeconfig", alice); !strings.Contains(r.stdout, "Roll-out:     Paused web-2, current wave all, by alice\n") {
		t.Errorf("status of a paused roll-out does not say who paused it:\n%s%s", r.stdout, r.stderr)
	}

	// Abort: --preparation must name what the Serving rolls out.
	r = kubectlKokumi(t, "abort", "web", "--preparation", "web-1", "--kubeconfig", alice)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: --preparation: Serving held/web rolls out Preparation web-2, not web-1") {
		t.Errorf("abort of another Preparation: exit %d %q", r.code, r.stderr)
	}
	if c := servingOf(t, ns, "web").Spec.Rollout; c.Abort != "" {
		t.Fatalf("a refused abort wrote spec.rollout.abort %q", c.Abort)
	}
	r = kubectlKokumi(t, "abort", "web", "--preparation", "web-2", "--kubeconfig", alice)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Aborted the roll-out of Preparation web-2 of Serving held/web: ") {
		t.Errorf("abort: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if c := servingOf(t, ns, "web").Spec.Rollout; c == nil || c.Abort != "web-2" || !c.Paused || c.By != "alice" {
		t.Errorf("spec.rollout after alice aborted: %+v", c)
	}
	r = kubectlKokumi(t, "abort", "web", "--kubeconfig", alice)
	if r.code != 1 || !strings.Contains(r.stderr, "already aborted by alice") || !strings.Contains(r.stderr, "promote another Preparation") {
		t.Errorf("abort again: exit %d %q", r.code, r.stderr)
	}

	// Resume as the admin: by names the admin, as the API server knows them.
	r = kubectlKokumi(t, "resume", "web", "-n", ns)
	if r.code != 0 || r.stdout != "Resumed the roll-out of Preparation web-2 of Serving held/web: the waves go on from where they stood\n" {
		t.Errorf("resume: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if c := servingOf(t, ns, "web").Spec.Rollout; c == nil || c.Paused || c.Abort != "web-2" || c.By == "alice" || c.By == "" {
		t.Errorf("spec.rollout after the admin resumed: %+v, want not paused, by the admin", c)
	}
	r = kubectlKokumi(t, "resume", "web", "--kubeconfig", alice)
	if r.code != 0 || r.stdout != "The roll-out of Serving held/web is not paused: nothing changed\n" {
		t.Errorf("resume when not paused: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	// Nothing promoted: nothing to pause.
	r = kubectlKokumi(t, "pause", "empty", "--kubeconfig", alice)
	if r.code != 1 || !strings.Contains(r.stderr, "deploys no Preparation yet, so there is no roll-out to pause: promote one first") {
		t.Errorf("pause of a Serving without a Preparation: exit %d %q", r.code, r.stderr)
	}

	// A viewer is refused by the API server, and told what role they need.
	viewer := personIn(t, ns, "vera", "view")
	r = kubectlKokumi(t, "pause", "web", "--kubeconfig", viewer)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: the API server refused to let you patch Serving held/web: ") || !strings.Contains(r.stderr, "view only reads") {
		t.Errorf("pause as a viewer: exit %d %q", r.code, r.stderr)
	}
	if c := servingOf(t, ns, "web").Spec.Rollout; c.Paused {
		t.Errorf("a viewer's pause paused the roll-out: %+v", c)
	}
}

func TestTheHelpOfPauseResumeAndAbortExplainsThem(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"pause":  {"kubectl kokumi pause SERVING", "no further cluster is", "kubectl kokumi pause web -n shop", "spec.rollout.by", "kubectl auth whoami", "edit and admin roles"},
		"resume": {"kubectl kokumi resume SERVING", "go on from where they stood", "kubectl kokumi resume web -n shop"},
		"abort":  {"kubectl kokumi abort SERVING", "--preparation", "goes back to the last Preparation", "first wave", "kubectl kokumi abort web -n shop --preparation web-7c9f"},
	} {
		r := kubectlKokumi(t, cmd, "--help")
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%s --help: exit %d %q", cmd, r.code, r.stderr)
		}
		for _, want := range append(wants, "Examples:", "--kubeconfig") {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s --help does not say %q:\n%s", cmd, want, r.stdout)
			}
		}
	}
	if r := kubectlKokumi(t, "abort"); r.code != 1 || !strings.HasPrefix(r.stderr, "error: missing SERVING: usage: kubectl kokumi abort SERVING (see --help)") {
		t.Errorf("abort without a Serving: exit %d %q", r.code, r.stderr)
	}
}
