"""What an operator runs: the reconciler (open calls flagged and resolved, with its heartbeat
and metrics), archiving to SQL, retention, and the doctor's check of a server."""
