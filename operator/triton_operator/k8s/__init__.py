"""The operator in a cluster: kopf handlers over the same pure pass and control-API sync that local mode uses.
It observes (indexes, API calls, the pods' sync) and executes what decide/ decides.

kopf's handlers (handlers.py) keep indexes of servers, models, pods and ConfigMaps (state.py),
keep the TritonModel finalizer (finalizer.py) and wake one worker per TritonServer; the worker's
jobs, one module each:

- the loop, its backoff and the order of one pass: worker.py
- what a pass keeps for the next, so that it parses and renders only what changed: kept.py
- the key Secrets (control and shared-memory keys), read, made and rotated: key_secrets.py
- the children (child TritonServer, Deployment, Service, config ConfigMaps, the autoscaler), written
  only when changed: children.py
- the autoscaler the spec no longer asks for, deleted, and the one that scales the server, read
  for its status: autoscaler.py
- the pods' sync over Triton's control API and their readinessGate condition: pods.py
- canary rollouts' revision ConfigMaps, Events and metrics: canary_rollouts.py; their probe requests: probing.py
- statuses and Warning Events, written only when changed: status_writer.py (what they say is
  computed by the pure functions of decide/statuses.py and decide/conditions.py)

Around them: api.py (the API client on kopf's credentials), metrics.py, settings.py, run.py
(`triton-operator run`), and leader election: lease.py (the Lease and its rules) and leading.py
(kopf runs only while this process leads).
"""
