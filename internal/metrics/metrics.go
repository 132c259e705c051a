// Package metrics holds Kokumi's own Prometheus metrics, registered on controller-runtime's
// registry so that the manager's metrics endpoint serves them next to controller-runtime's
// (reconciles, work queues, the API client).
//
// Cardinality is bounded by what the cluster holds: per-Serving series (namespace, serving)
// for kokumi_serving_clusters, kokumi_serving_ready and kokumi_promotions_waiting, per-Cluster
// series for kokumi_cluster_ready only, per-Environment series (namespace, environment) for
// kokumi_environment_webhook_keys_missing (of the Environments that sign a webhook), and a
// fixed set of result values for the histograms and the webhook deliveries.
// No series carries a Preparation, an Application, a reason or an error text. The series of an
// object go when the object does. docs/metrics.md lists every metric.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of a timed operation, the values of the result label.
const (
	// Success: the operation did its work.
	Success = "success"
	// Failure: it failed.
	Failure = "failure"
	// Skipped: an Order's render found nothing changed since its latest Preparation and
	// rendered nothing.
	Skipped = "skipped"
)

// States of a Serving's clusters, the values of kokumi_serving_clusters' state label; they
// are the fields of a Serving's status.clusters.
const (
	StateSelected    = "selected"
	StateHealthy     = "healthy"
	StateProgressing = "progressing"
	StateDegraded    = "degraded"
	StateHeld        = "held"
	StateDrifted     = "drifted"
)

// Kinds that wait on a promotion stage, the values of kokumi_promotions_waiting's kind label.
const (
	// KindOrder: an Automatic Order holds its new Preparation back.
	KindOrder = "order"
	// KindServing: a Serving holds back the Preparation it was promoted to.
	KindServing = "serving"
)

// Metric names, for the tests and the dashboard that refer to them.
const (
	ServingClustersName         = "kokumi_serving_clusters"
	ServingReadyName            = "kokumi_serving_ready"
	PromotionsWaitingName       = "kokumi_promotions_waiting"
	OrderRenderSecondsName      = "kokumi_order_render_seconds"
	ClusterProbeSecondsName     = "kokumi_cluster_probe_seconds"
	ClusterReadyName            = "kokumi_cluster_ready"
	RecordsSignedName           = "kokumi_deployment_records_signed_total"
	ApplicationWriteSecondsName = "kokumi_application_write_seconds"
	ApplicationsCachedName      = "kokumi_applications_cached"
	OrphansDeletedName          = "kokumi_orphan_applications_deleted_total"
	NotificationDeliveriesName  = "kokumi_notification_deliveries_total"
	WebhookKeysMissingName      = "kokumi_environment_webhook_keys_missing"
)

// Results of a delivery to an Environment's webhook, the values of
// kokumi_notification_deliveries_total's result label.
const (
	// DeliverySent: the webhook answered 2xx.
	DeliverySent = "sent"
	// DeliveryFailed: given up, after the last try, a 4xx other than 429, or a missing Secret.
	DeliveryFailed = "failed"
	// DeliveryDropped: the queue was full; it was never tried (or not tried again).
	DeliveryDropped = "dropped"
)

var (
	servingClusters = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: ServingClustersName,
		Help: "Clusters of a Serving by the state of their deployment, as its status.clusters counts them (state: selected, healthy, progressing, degraded, drifted, held).",
	}, []string{"namespace", "serving", "state"})

	servingReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: ServingReadyName,
		Help: "1 when the Serving's Ready condition is True, 0 otherwise.",
	}, []string{"namespace", "serving"})

	promotionsWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: PromotionsWaitingName,
		Help: "1 while the Order (kind=order) or the Serving (kind=serving) of that name waits for a stage of its Environment's promotion pipeline (Ready reason AwaitingStage), 0 otherwise.",
	}, []string{"namespace", "serving", "kind"})

	renderSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: OrderRenderSecondsName,
		Help: "Time an Order's render took: pull, render, images and push (result: success, failure, or skipped when nothing changed).",
		// From a skipped render (a few HEAD requests) to the five-minute timeout.
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, []string{"result"})

	probeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: ClusterProbeSecondsName,
		Help: "Time a probe of a Cluster's server (GET /version) took (result: success, failure).",
		// A probe gives up after 2 to 10 seconds.
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"result"})

	clusterReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: ClusterReadyName,
		Help: "1 when the Cluster's Ready condition is True (its server answered), 0 otherwise.",
	}, []string{"cluster"})

	recordsSigned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: RecordsSignedName,
		Help: "Deployment records signed and attached to a Preparation's artifact.",
	})

	orphansDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: OrphansDeletedName,
		Help: "Argo CD Applications Kokumi deleted because the Serving they were written for is gone (what runs on the cluster keeps running).",
	})

	applicationWriteSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    ApplicationWriteSecondsName,
		Help:    "Time one create or update of an Argo CD Application by a Serving took (result: success, failure).",
		Buckets: prometheus.DefBuckets,
	}, []string{"result"})

	notificationDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NotificationDeliveriesName,
		Help: "Deliveries of roll-out transitions to the Environments' webhooks (spec.notifications) by result: sent (2xx), failed (given up), dropped (the queue was full).",
	}, []string{"result"})

	webhookKeysMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: WebhookKeysMissingName,
		Help: "Webhooks of the Environment (spec.notifications) whose key (secretRef) is not in Kokumi's namespace or is no webhook key: they are sent nothing (its condition Notifications says why).",
	}, []string{"namespace", "environment"})

	applicationsCached = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: ApplicationsCachedName,
		Help: "Argo CD Applications in Kokumi's cache of Argo CD's namespace: Kokumi's own, of this replica's shard (the UI's cache holds every shard's). It reaches the number of Kokumi's Applications once a start has listed them all.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(servingClusters, servingReady, promotionsWaiting, renderSeconds,
		probeSeconds, clusterReady, recordsSigned, applicationWriteSeconds, applicationsCached, orphansDeleted,
		notificationDeliveries, webhookKeysMissing)
	// The series of every result exist from the start, at zero: a rate() over them, or an alert,
	// works before the first failure.
	for _, r := range []string{Success, Failure, Skipped} {
		renderSeconds.WithLabelValues(r)
	}
	for _, r := range []string{Success, Failure} {
		probeSeconds.WithLabelValues(r)
		applicationWriteSeconds.WithLabelValues(r)
	}
	for _, r := range []string{DeliverySent, DeliveryFailed, DeliveryDropped} {
		notificationDeliveries.WithLabelValues(r)
	}
}

// Result is Success when err is nil, else Failure.
func Result(err error) string {
	if err != nil {
		return Failure
	}
	return Success
}

// ClusterCounts are a Serving's cluster counts, as in its status.clusters.
type ClusterCounts struct {
	Selected, Healthy, Progressing, Degraded, Held, Drifted int32
}

// SetServing sets the series of a Serving: its cluster counts, whether it is Ready, and
// whether it waits for a promotion stage.
func SetServing(namespace, serving string, counts ClusterCounts, ready, awaitingStage bool) {
	for state, n := range map[string]int32{
		StateSelected: counts.Selected, StateHealthy: counts.Healthy, StateProgressing: counts.Progressing,
		StateDegraded: counts.Degraded, StateHeld: counts.Held, StateDrifted: counts.Drifted,
	} {
		servingClusters.WithLabelValues(namespace, serving, state).Set(float64(n))
	}
	servingReady.WithLabelValues(namespace, serving).Set(bool01(ready))
	promotionsWaiting.WithLabelValues(namespace, serving, KindServing).Set(bool01(awaitingStage))
}

// ForgetServing deletes the series of a Serving that is gone or being deleted.
func ForgetServing(namespace, serving string) {
	labels := prometheus.Labels{"namespace": namespace, "serving": serving}
	servingClusters.DeletePartialMatch(labels)
	servingReady.DeletePartialMatch(labels)
	promotionsWaiting.Delete(prometheus.Labels{"namespace": namespace, "serving": serving, "kind": KindServing})
}

// SetOrderWaiting sets whether an Order waits for a promotion stage before it promotes.
func SetOrderWaiting(namespace, order string, awaitingStage bool) {
	promotionsWaiting.WithLabelValues(namespace, order, KindOrder).Set(bool01(awaitingStage))
}

// ForgetOrder deletes the series of an Order that is gone or being deleted.
func ForgetOrder(namespace, order string) {
	promotionsWaiting.Delete(prometheus.Labels{"namespace": namespace, "serving": order, "kind": KindOrder})
}

// ObserveRender records how long an Order's render took, with its result (Success, Failure
// or Skipped).
func ObserveRender(result string, d time.Duration) {
	renderSeconds.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveProbe records how long a probe of a Cluster's server took and whether it connected.
func ObserveProbe(connected bool, d time.Duration) {
	result := Failure
	if connected {
		result = Success
	}
	probeSeconds.WithLabelValues(result).Observe(d.Seconds())
}

// SetClusterReady sets whether a Cluster is Ready.
func SetClusterReady(cluster string, ready bool) {
	clusterReady.WithLabelValues(cluster).Set(bool01(ready))
}

// ForgetCluster deletes the series of a Cluster that is gone.
func ForgetCluster(cluster string) {
	clusterReady.DeleteLabelValues(cluster)
}

// RecordSigned counts a deployment record signed and attached.
func RecordSigned() { recordsSigned.Inc() }

// OrphanDeleted counts an Application deleted because its Serving is gone.
func OrphanDeleted() { orphansDeleted.Inc() }

// ObserveApplicationWrite records how long one write of an Argo CD Application took, and
// whether it failed.
func ObserveApplicationWrite(err error, d time.Duration) {
	applicationWriteSeconds.WithLabelValues(Result(err)).Observe(d.Seconds())
}

// NotificationDelivered counts a delivery to a webhook by its result (DeliverySent,
// DeliveryFailed or DeliveryDropped).
func NotificationDelivered(result string) { notificationDeliveries.WithLabelValues(result).Inc() }

// SetWebhookKeysMissing sets how many webhooks of an Environment have no usable key; an
// Environment without a signed webhook has no series.
func SetWebhookKeysMissing(namespace, environment string, signed, missing int) {
	if signed == 0 {
		ForgetEnvironment(namespace, environment)
		return
	}
	webhookKeysMissing.WithLabelValues(namespace, environment).Set(float64(missing))
}

// ForgetEnvironment deletes the series of an Environment that is gone.
func ForgetEnvironment(namespace, environment string) {
	webhookKeysMissing.DeleteLabelValues(namespace, environment)
}

// ApplicationCached counts an Application the cache of Argo CD's namespace took in (delta 1)
// or let go (delta -1).
func ApplicationCached(delta float64) { applicationsCached.Add(delta) }

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
