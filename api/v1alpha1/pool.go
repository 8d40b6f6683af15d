package v1alpha1

// CarryPool copies the pool label (LabelPool) of from, when it has one, into
// to, and returns to (made when nil and needed). What the operator makes for
// a run — its Lease, attempt pods, CronJobs and the runs those create —
// carries the run's pool, so a sharded manager's cache (--shard) holds them
// and its follow-up runs land in its own shard.
func CarryPool(to, from map[string]string) map[string]string {
	p, ok := from[LabelPool]
	if !ok {
		return to
	}
	if to == nil {
		to = map[string]string{}
	}
	to[LabelPool] = p
	return to
}
