"""The operator process, above every controller: builds the controllers and connects them to their
watches (the operator's own informers, kopf), leader election and the health endpoints."""
