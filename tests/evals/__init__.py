"""Reference delegations that measure how well a model does the job (``make eval``)."""
