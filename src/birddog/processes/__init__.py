"""The processes BirdDog runs, one module each; each is the one file that runs its process.

- :mod:`birddog.processes.daemon`: the drain daemon (``birddog run``).
- :mod:`birddog.processes.worker`: the job worker (``birddog worker``).
- :mod:`birddog.processes.console`: the operator's console (``birddog console``).
- :mod:`birddog.processes.mcp`: the MCP server (``birddog mcp``).
- :mod:`birddog.processes.sides`: the one way every process runs its side tasks
  (heartbeat, gauges, reapers, prune, the ``LISTEN`` connection, the metrics server).

A process module takes its adapters from the composition root (:mod:`birddog.bootstrap`:
``open_adapters``, ``build_*``), installs its signal handlers with
:func:`birddog.runtime.stop_on_signals`, and runs its loop with its side tasks beside it.
A new process (an MCP server, an A2A endpoint, a spool forwarder) is one more module here.
"""
