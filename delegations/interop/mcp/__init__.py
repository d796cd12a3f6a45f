"""Handoff as an MCP server (``/mcp``): any MCP client finds skills, lints packets, starts
and follows runs, under the same tokens, roles, limits and inbox as the REST API."""
