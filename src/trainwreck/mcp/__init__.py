"""`trainwreck mcp`: diagnose, explain and the entries as read-only tools for coding assistants,
over the Model Context Protocol (stdio).

Modules: `tools` (what each tool does, over the diagnose, explain and knowledge APIs; plain
Python, no MCP dependency, so it is tested on its own), `entries` (an entry's sections as
Markdown), `server` (the MCP server on the official SDK, `mcp` 2.x, the optional extra
`trainwreck[mcp]`, and the command line).
"""
