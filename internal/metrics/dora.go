package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kokumi-dev/kokumi/internal/dora"
)

// The delivery measures' series (docs/metrics.md, "Delivery measures"): each is counted when
// the controller signs the evidence it stands for, labelled by Environment and Order.
const (
	DeploymentsName    = "kokumi_dora_deployments_total"
	LeadTimeName       = "kokumi_dora_lead_time_seconds"
	ChangeFailuresName = "kokumi_dora_change_failures_total"
	TimeToRestoreName  = "kokumi_dora_time_to_restore_seconds"
)

// OtherOrder is the order label of the Orders past the limit of DORAOrderLabels.
const OtherOrder = "other"

// DefaultDORAOrderLabels is how many Orders have an order label of their own by default.
const DefaultDORAOrderLabels = 100

var (
	deployments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: DeploymentsName,
		Help: "Deployments: the first signed deployment record of the whole Environment of a Preparation, by Environment and Order (namespace/name; \"other\" past the limit of --dora-order-labels).",
	}, []string{"environment", "order"})

	leadTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    LeadTimeName,
		Help:    "Lead time of each deployment: from the start of the render that made the Preparation (its signed provenance's startedOn) to its Environment's deployment record.",
		Buckets: []float64{300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400, 2 * 86400, 4 * 86400, 7 * 86400, 14 * 86400, 30 * 86400},
	}, []string{"environment", "order"})

	changeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: ChangeFailuresName,
		Help: "Change failures, each signed: kind halted, rolledback or aborted (a roll-out failure) or revoked (a revocation after Deployed).",
	}, []string{"environment", "order", "kind"})

	timeToRestore = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    TimeToRestoreName,
		Help:    "Time to restore: from a failure of an Environment and Order (none open before it) to its next deployment record of the whole Environment, as this controller saw both.",
		Buckets: []float64{60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400, 2 * 86400, 7 * 86400},
	}, []string{"environment", "order"})
)

func init() {
	crmetrics.Registry.MustRegister(deployments, leadTime, changeFailures, timeToRestore)
}

// doraLabels bounds the order label: the first limit Orders seen have their own, the rest are
// "other"; and keeps the open outage of each Environment and Order.
type doraLabels struct {
	mu     sync.Mutex
	limit  int
	orders map[string]bool
	open   map[[2]string]time.Time // by environment and namespace/name: when the outage started
}

var doraState = &doraLabels{limit: DefaultDORAOrderLabels, orders: map[string]bool{}, open: map[[2]string]time.Time{}}

// SetDORAOrderLabels sets how many Orders have an order label of their own (0: none, all are
// "other"); set it before the first evidence is signed.
func SetDORAOrderLabels(n int) {
	doraState.mu.Lock()
	defer doraState.mu.Unlock()
	doraState.limit = max(n, 0)
}

// orderLabel is the order label of namespace/name. The caller holds mu.
func (d *doraLabels) orderLabel(namespace, name string) string {
	o := namespace + "/" + name
	if d.orders[o] {
		return o
	}
	if len(d.orders) >= d.limit {
		return OtherOrder
	}
	d.orders[o] = true
	return o
}

// Deployed counts a deployment of the Order namespace/name in environment, signed at at: its
// lead time when known (ok), and the time to restore of the outage it ends, if one is open.
func Deployed(environment, namespace, name string, lead time.Duration, ok bool, at time.Time) {
	doraState.mu.Lock()
	defer doraState.mu.Unlock()
	order := doraState.orderLabel(namespace, name)
	touch(environment, order)
	deployments.WithLabelValues(environment, order).Inc()
	if ok {
		leadTime.WithLabelValues(environment, order).Observe(lead.Seconds())
	}
	restoredAt(environment, namespace, name, order, at)
}

// touch makes every series of an Environment and Order exist, at zero until counted, so that a
// rate or a ratio over them works from its first evidence on.
func touch(environment, order string) {
	deployments.WithLabelValues(environment, order)
	leadTime.WithLabelValues(environment, order)
	timeToRestore.WithLabelValues(environment, order)
	for _, k := range dora.FailureKinds {
		changeFailures.WithLabelValues(environment, order, string(k))
	}
}

// Restored ends the outage of the Order namespace/name in environment, if one is open, with a
// record of the whole Environment signed at at that is no new deployment.
func Restored(environment, namespace, name string, at time.Time) {
	doraState.mu.Lock()
	defer doraState.mu.Unlock()
	restoredAt(environment, namespace, name, doraState.orderLabel(namespace, name), at)
}

// restoredAt observes the time to restore of the open outage that a record at at ends. The
// caller holds mu.
func restoredAt(environment, namespace, name, order string, at time.Time) {
	key := [2]string{environment, namespace + "/" + name}
	if since, open := doraState.open[key]; open && dora.Restores(dora.Event{Kind: dora.Deployed, Time: at}, since) {
		timeToRestore.WithLabelValues(environment, order).Observe(at.Sub(since).Seconds())
		delete(doraState.open, key)
	}
}

// ChangeFailed counts a failure of kind (halted, rolledback, aborted, revoked) of the Order
// namespace/name in environment, signed as of at; it opens an outage unless one is open.
func ChangeFailed(environment, namespace, name, kind string, at time.Time) {
	doraState.mu.Lock()
	defer doraState.mu.Unlock()
	order := doraState.orderLabel(namespace, name)
	touch(environment, order)
	changeFailures.WithLabelValues(environment, order, kind).Inc()
	outageSince(environment, namespace, name, at)
}

// FailureFound opens an outage of the Order namespace/name in environment at at unless one is
// open, counting nothing: a failure signed before this process started, found again.
func FailureFound(environment, namespace, name string, at time.Time) {
	doraState.mu.Lock()
	defer doraState.mu.Unlock()
	outageSince(environment, namespace, name, at)
}

// outageSince opens an outage unless one is open. The caller holds mu.
func outageSince(environment, namespace, name string, at time.Time) {
	key := [2]string{environment, namespace + "/" + name}
	if _, open := doraState.open[key]; !open {
		if len(doraState.open) >= maxOpenOutages {
			return
		}
		doraState.open[key] = at
	}
}

// maxOpenOutages bounds the outages kept in memory.
const maxOpenOutages = 100000
