"""Composing delegations: saved contracts, the composer and the tree editor, and the
delegations API. (Empty until the composer lands; the ``Delegation`` model is in
``delegations.models``.)"""
