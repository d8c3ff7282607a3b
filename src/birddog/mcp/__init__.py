"""``birddog mcp``: the mail room as MCP tools, for every agent that takes its tools from MCP.

- :mod:`birddog.mcp.schemas`: what each tool declares (title, annotations, described
  arguments, closed output schemas) and the bounds.
- :mod:`birddog.mcp.arguments`: a tool's arguments, each wrong one refused by name.
- :mod:`birddog.mcp.texts`: how a result reads (one text block: a line, then its JSON;
  structured content only on a success).
- :mod:`birddog.mcp.tools`: the agent tools, what the tools do for one caller; it calls the same
  adapters the command line calls and never touches SQL. :mod:`birddog.mcp.tasks`: the
  tasks callers took with ``next_task``.
- :mod:`birddog.mcp.server`: the tools on the official ``mcp`` SDK's server, over stdio.
- :mod:`birddog.mcp.http`: over streamable HTTP with bearer tokens, the metadata that
  says how to get one, the loopback test mode; :mod:`birddog.mcp.sessions`: per-token
  session quotas, the idle timeout, resumable streams.

The SDK is imported only by the server modules, so ``import birddog`` stays light; it
comes with the ``mcp`` extra (``pip install 'birddog[mcp]'``).
"""
