"""Live updates over websockets.

- ``feed``: publishing stored run events and inbox changes to the channel layer, and the
  process's :class:`~delegations.live.feed.RunFeed` that hands them to its viewers
- ``consumers``, ``routing``: the ``/ws/runs/<id>/`` and ``/ws/inbox/`` websockets
"""
