"""Handoff as an A2A 1.0 agent (``/.well-known/agent-card.json`` and ``/a2a/…``): a remote
caller's task is a Handoff run, linted, schema-checked, kept to its budget and capabilities,
and its risky steps wait for a person in the inbox. Built on the official ``a2a-sdk``."""
