"""Run pages: what a person sees of runs, drawn from the engine's records (``delegations.runs``).

- ``views``, ``forms``: the run list, starting a run, a run's page and what can be done on it
- ``snapshot``: a run's state for its page (the live view and its no-JS snapshot render it)
- ``tree_view``, ``timeline_filter``, ``replay``: its tree and waterfall, the timeline's
  filter, and the events a replay steps through
- ``display``, ``failure``: figures, states and a failed run's headline, as pages word them
- ``compare``, ``imports``: attempts of one request side by side, and a run file brought in
  from another instance
"""
