"""Handoff spoken to other programs in their own protocols, as an API layer beside the REST
routers: each protocol calls the same workflows as /api/runs and /api/skills."""
