"""The application layer: the mail service, the mail room, replay and spool forwarding.

Written against ports only (:mod:`birddog.ports`) over the pure core; the composition
root (:mod:`birddog.bootstrap`) builds each over its adapters, and the entry points (the
command line, the MCP and A2A servers, the console) call them.

- :mod:`~birddog.service.mail`: :class:`~birddog.service.mail.MailService` (send, ask,
  wait, the spool path); :mod:`~birddog.service.waiting` (the wait for a reply, and the
  :class:`~birddog.service.waiting.Question` a caller's wait holds);
  :mod:`~birddog.service.timeouts` (the deadline and the errors for a reply still owed),
  :mod:`~birddog.service.asked` (what a send came to, a reply as an answer),
  :mod:`~birddog.service.writing` (a mail into the database or the spool).
- :mod:`~birddog.service.forwarding`: the spool's forwarder.
- :mod:`~birddog.service.mailroom`: fan-out and the drain.
- :mod:`~birddog.service.replaying`: replay of dead letters once their cause is gone.
"""
