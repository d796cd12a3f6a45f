"""The MCP servers whose tools runs may use (``McpServer`` records): their REST routes.
The client that calls them is the protocol's (``delegations.protocol.mcp_client``)."""
