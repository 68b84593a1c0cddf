"""Leader election: the Lease and its rules, and kopf running only while this process leads."""
