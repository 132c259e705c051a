package metrics

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// count is how many series c has.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// value is a gauge's value.
func value(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func TestAServingsSeriesGoWithIt(t *testing.T) {
	SetServing("ns", "a", ClusterCounts{Selected: 4, Healthy: 1, Progressing: 1, Held: 1, Drifted: 1}, false, true)
	SetServing("ns", "b", ClusterCounts{Selected: 1, Healthy: 1}, true, false)
	SetOrderWaiting("ns", "a", true)
	if got := value(t, servingClusters.WithLabelValues("ns", "a", StateHeld)); got != 1 {
		t.Errorf("held %v, want 1", got)
	}
	if got := value(t, servingClusters.WithLabelValues("ns", "a", StateDrifted)); got != 1 {
		t.Errorf("drifted %v, want 1", got)
	}
	if got := value(t, promotionsWaiting.WithLabelValues("ns", "a", KindServing)); got != 1 {
		t.Errorf("waiting %v, want 1", got)
	}
	ForgetServing("ns", "a")
	// b's six states and Ready, b's waiting; a's Order still waits.
	if n := count(servingClusters); n != 6 {
		t.Errorf("%d series of %s after a went, want 6", n, ServingClustersName)
	}
	if n := count(promotionsWaiting); n != 2 {
		t.Errorf("%d series of %s, want 2 (b's Serving, a's Order)", n, PromotionsWaitingName)
	}
	ForgetOrder("ns", "a")
	ForgetServing("ns", "b")
	if n := count(servingClusters) + count(servingReady) + count(promotionsWaiting); n != 0 {
		t.Errorf("%d series left", n)
	}
}

func TestResultsExistFromTheStart(t *testing.T) {
	if n := count(renderSeconds); n != 3 {
		t.Errorf("%d series of %s, want success, failure and skipped", n, OrderRenderSecondsName)
	}
	if n := count(notificationDeliveries); n != 3 {
		t.Errorf("%d series of %s, want sent, failed and dropped", n, NotificationDeliveriesName)
	}
	ObserveApplicationWrite(errors.New("conflict"), time.Millisecond)
	if got := count(applicationWriteSeconds); got != 2 {
		t.Errorf("%d series of %s, want 2", got, ApplicationWriteSecondsName)
	}
	SetWebhookKeysMissing("team-a", "edge", 2, 1)
	SetWebhookKeysMissing("team-a", "dev", 0, 0)
	if n := count(webhookKeysMissing); n != 1 {
		t.Errorf("%d series of %s, want the one of the Environment that signs", n, WebhookKeysMissingName)
	}
	ForgetEnvironment("team-a", "edge")
	if n := count(webhookKeysMissing); n != 0 {
		t.Errorf("%d series of %s after the Environment went", n, WebhookKeysMissingName)
	}
	SetClusterReady("c", true)
	ForgetCluster("c")
	if n := count(clusterReady); n != 0 {
		t.Errorf("%d series of %s after the Cluster went", n, ClusterReadyName)
	}
}
