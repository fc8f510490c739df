"""Command-line entry points: the controller manager, the dev cluster, the demo."""
