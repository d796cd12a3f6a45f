"""Composing delegations: a delegation is a saved hand-off packet (the ``Delegation``
model, in ``delegations.models``) with its versions and its child delegations.

- ``services``: saving, moving, deleting and running delegations, each save a kept version
- ``views``, ``forms``, ``criteria_rows``, ``schema_fields``: the delegation list and the
  composer, its form sections, success criteria rows and the fields a skill's input schema gives
- ``starters``: the packets a new delegation can start from
- ``tree``, ``tree_views``, ``tree_history``: the tree editor, its page and its undo history
- ``dry_run``: one node run on its own before the whole tree
- ``api``: ``/api/delegations`` over the services
"""
