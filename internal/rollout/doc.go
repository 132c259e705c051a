// Package rollout holds the rules of a Serving's roll-out, apart from its reconciler (as Argo
// CD keeps applicationset/progressivesync apart from its controller): the waves of the
// Environment's policy, its gates (verifications and approvals), its windows, a person's pause,
// resume and abort, and the preview of a roll-out. Plan decides one reconcile's roll-out from
// plain values (the Applications observed, the waves, the policy, the previous status, lookups
// of Preparations): it runs internal/fleet's Decide and the progress deadline once, gives each
// cluster its standing in the waves, steps the roll-out through Decide's named steps (control,
// windows, gates, budget, rollback, advance, admit, conclude), and edits the request of the
// clusters that wait, join or go back (a rollback decides the fleet again, for the Preparation it
// goes back to). Fold folds the decisions as the writes left them into the Serving's status,
// with the plan's Ready: the Serving's Ready has no other owner. Request is the one mapping of a
// Preparation into the fleet's request. The package reads and writes nothing: the mechanics of
// the writes, with their memories, are internal/rollout/writes'.
package rollout
