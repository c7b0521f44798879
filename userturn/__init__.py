"""userturn: measure interaction awareness by making a model write the next user turn.

The distribution installs one import name. The top-level folders of the repository map onto it:
``client/`` → ``userturn.client``, ``serve/`` → ``userturn.serve``, ``judges/`` → ``userturn.judges``, and the data
folders ``manifests/`` → ``userturn.manifests``, ``experiments/`` → ``userturn.experiments`` (``userturn.shipped``).
"""

__version__ = "0.1.0"
