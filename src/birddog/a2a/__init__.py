"""A2A: BirdDog agents answer the Agent2Agent protocol, and remote A2A agents answer mail.

- :mod:`birddog.a2a.tasks` maps ask jobs to A2A tasks (ids, states, messages).
- :mod:`birddog.a2a.server` puts every agent with a route on ``a2a-sdk``'s server
  (``birddog a2a``), BirdDog behind its request handler interface.

The SDK is imported only by these modules, so ``import birddog`` stays light; it comes
with the ``a2a`` extra (``pip install 'birddog[a2a]'``).
"""
