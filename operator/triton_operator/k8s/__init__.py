"""The operator in a cluster: kopf handlers over the same pure pass and control-API sync that local mode uses.
It observes (indexes, API calls, the pods' sync) and executes what decide/ decides.

Its rooms, one concern each:

- watch/: what kopf shows the operator: the handlers (handlers.py), the indexes of servers, models, pods
  and ConfigMaps (indexes.py), the TritonModel finalizer (finalizer.py)
- server/: one worker per TritonServer and what it writes: the loop and one pass, observed, planned,
  executed and concluded (worker.py), the workers by server (workers.py), what a pass keeps for the next
  (kept.py), the children (children.py, ownership.py), the key Secrets (key_secrets.py), the autoscaler
  the spec no longer asks for (autoscaler_upkeep.py), the memory sidecars' readings (sidecar_reads.py),
  the statuses (status_writer.py), tritonserver deaths (crash_watch.py)
- pods/: the pods' sync over Triton's control API and their readinessGate condition (pod_sync.py), and
  whether the operator reaches them (reachability.py)
- rollouts/: canary rollouts' revision ConfigMaps and metrics (rollout_writes.py) and probe requests
  (canary_prober.py)
- placer.py: the task that places models with a serverSelector
- election/: leader election, the Lease and its rules (lease.py) and kopf run only while leading (leading.py)
- process/: `triton-operator run` (run.py), its settings (settings.py) and metrics (metrics.py)
- api.py: the API client on kopf's credentials
- actions.py: a pass as values (what it saw, its plans' entries, what executing them reported);
  expectations.py: what every writer wrote and the watch has not shown yet; events.py: the one module
  that posts Events
"""
