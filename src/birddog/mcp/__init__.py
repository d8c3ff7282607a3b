"""``birddog mcp``: the mail room as MCP tools, for every agent that takes its tools from MCP.

- :mod:`birddog.mcp.tools` is what the tools do, for one caller: it checks the
  arguments and calls the same adapters the command line calls (send, ask, wait, inbox,
  ack, claim, settle, story, routes). It never touches SQL and does not import the SDK.
- :mod:`birddog.mcp.server` puts those tools on the official ``mcp`` SDK's server, over
  stdio or streamable HTTP with bearer tokens.

The SDK is imported only by the server module, so ``import birddog`` stays light; it
comes with the ``mcp`` extra (``pip install 'birddog[mcp]'``).
"""
